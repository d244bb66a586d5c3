"""The ceiling of ESSA's search space on a task: exact gradient ascent over the same singular-value offsets.

ESSA searches offsets to the top floor(alpha*r) singular values of each LoRA factor (docs/algorithms.md sec. 2.2). How
much can any optimiser gain in that subspace? Here the offsets are a torch parameter, the factors are rebuilt
differentiably exactly as `SVDLoRA.apply` does (A' = A0 + U_k diag(δ) V_kᵀ), and Adam minimises the SFT loss
(teacher-forced cross-entropy on answer tokens) on the ESSA training split. Held-out greedy accuracy and pass@k
are printed along the way: the best of them is the yardstick for ESSA on this model (a white-box optimiser with
exact gradients on a smooth surrogate; ESSA only sees minibatch accuracy).

    .venv/bin/python bench/essa_ceiling.py -c configs/tiny-essa.yaml --steps 300 --lr 0.01
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch
from torch.func import functional_call

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.svd_lora import SVDLoRA
from essaflow.generation.sampling import TransformersGenerator
from essaflow.judging.evaluation import evaluate
from essaflow.model.loading import load_model_with_adapter
from essaflow.model.tiny import answer_only_batch
from essaflow.training.warm_start import cached_sft_adapter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-essa.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. essa.alpha=0.5")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--eval-every", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, args.set)
    splits = prepare_splits(cfg.data)
    sft = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    model, tok = load_model_with_adapter(cfg.model, sft)
    svd = SVDLoRA(model, cfg.essa.alpha)
    names = {id(p): n for n, p in model.named_parameters()}
    factors = [(names[id(f.weight)], f) for f in svd._factors]  # noqa: SLF001 (a bench reads the internals)
    delta = torch.zeros(svd.dimension, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=args.lr)
    gen = TransformersGenerator(model, tok, cfg.sampling.batch_size)
    rng = random.Random(cfg.essa.seed)

    def held_out() -> dict[str, float]:
        svd.apply(delta.detach().double().numpy())
        report = evaluate(gen, splits.eval, cfg.eval, cfg.sampling)
        return {k: round(v, 4) for k, v in report.summary().items() if k in ("greedy", "pass@1", "pass@8")}

    curve = [(0, held_out())]
    print(json.dumps({"step": 0, **curve[-1][1]}), flush=True)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = rng.sample(splits.train, args.batch)
        inputs = answer_only_batch(tok, [p.prompt for p in batch], [p.answer for p in batch])
        params = {}
        for (name, f), part in zip(factors, svd.layout):
            params[name] = f.w0 + (f.u * delta[part.start : part.stop]) @ f.vh
        loss = functional_call(model, params, args=(), kwargs=inputs).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            curve.append((step, held_out()))
            print(json.dumps({"step": step, "loss": round(loss.item(), 4), **curve[-1][1]}), flush=True)
    svd.apply(np.zeros(svd.dimension))
    best = max(curve, key=lambda c: c[1]["greedy"])
    print(
        json.dumps(
            {
                "dimension": svd.dimension,
                "sft": curve[0][1],
                "best_step": best[0],
                "best": best[1],
                "offset_norm": round(float(delta.detach().norm()), 3),
                "train_s": round(time.perf_counter() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
