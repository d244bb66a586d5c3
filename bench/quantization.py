"""A quantised frozen base for ESSA scoring (`model.quantization`, ESSA-v3 sec. 4.4.2): accuracy and speed, one run.

For each model, side by side: full precision with merged scoring (the default path), full precision on the LoRA
path (what a quantised base has to use, docs/algorithms.md sec. 6.15), and int8 (int4 too where there is a kernel:
CUDA + bfloat16 only, so not on CPU). Scorers are `essaflow.essa.scorer.CandidateScorer`, built from the
pipeline's own ScoringSpec (`essa.scoring_spec.scoring_spec`), one torch thread each.

(a) tiny: `builtin:tiny` with its cached SFT adapter (`warm_start.cached_sft_adapter`, as bench/essa_scaling.py):
    held-out greedy accuracy on the eval split at offsets 0 (the SFT point), the fitness of the same candidates
    (max |difference| and Spearman rank correlation against float32: does int8 rank candidates the same?), and
    candidates/s for the config's fitness (answer_logprob: one teacher-forced forward) and for decoded accuracy
    (the paper's fitness: b greedy decodes).
(b) large: a random 8-layer, 512-wide Llama (intermediate 1536, the tiny model's character tokenizer) with a random
    non-zero LoRA on all 7 linear types, built once under the cache: the matmuls dominate, so this is where int8
    can pay. Random weights make accuracy meaningless; fitness agreement and candidates/s are reported.

Candidates/s is the median over --repeats timed rounds of --candidates candidates each (after one warm-up call),
the variants' rounds interleaved so that load from other processes on shared cores hits them alike.

    .venv/bin/python bench/quantization.py                  # both models, ~3-5 min on 2 busy cores
    .venv/bin/python bench/quantization.py --models tiny
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from essaflow.config import PipelineConfig, load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.prompt_sampler import MinibatchSampler
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.judging.evaluation import greedy_accuracy
from essaflow.judging.judge import judge_for
from essaflow.model.quantization import check_supported, is_quantized
from essaflow.model.tiny import build_char_tokenizer
from essaflow.storage.cache_dir import cache_root
from essaflow.training.warm_start import cached_sft_adapter

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def large_model(cfg: PipelineConfig, layers: int, width: int) -> tuple[PipelineConfig, Path]:
    """A random Llama (layers x width) and a random non-zero LoRA adapter, saved once under the cache."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from essaflow.model.loading import attach_lora, load_base_model, save_adapter

    root = cache_root() / "bench" / f"quant-llama-{layers}x{width}"
    base = root / "base"
    if not (base / "config.json").exists():
        torch.manual_seed(0)
        tok = build_char_tokenizer()
        LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok), hidden_size=width, intermediate_size=3 * width, num_hidden_layers=layers,
                num_attention_heads=width // 64, num_key_value_heads=width // 64, max_position_embeddings=64,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
                tie_word_embeddings=True,
            )
        ).save_pretrained(base)  # fmt: skip
        tok.save_pretrained(base)
    run = cfg.model_copy(deep=True)
    run.model = run.model.model_copy(update={"name_or_path": str(base), "target_modules": ALL_LINEAR})
    adapter = root / "adapter"
    if not (adapter / "adapter_config.json").exists():
        model = attach_lora(load_base_model(run.model), run.model, seed=0)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        save_adapter(model, adapter, build_char_tokenizer())
    return run, adapter


def variants(device: str, dtype: str) -> list[tuple[str, str, bool]]:
    """(label, model.quantization, merged scoring) to compare; int4 only where a kernel exists."""
    out = [("float32 merged", "none", True), ("float32 lora-path", "none", False), ("int8", "int8", False)]
    try:
        check_supported("int4", device, "bfloat16" if device == "cuda" else dtype)
        out.append(("int4", "int4", False))
    except Exception as err:  # reported, not hidden
        print(f"int4 skipped: {err}")
    return out


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (decoded accuracy ties often at b = 128)."""
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a))
    for v in np.unique(a):
        ranks[a == v] = ranks[a == v].mean()
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation; nan when either side is constant (nothing to rank)."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def measure(cfg, splits, adapter, variants, xs, batch, repeats, fitnesses, held_out) -> dict[str, dict]:
    """Per variant: held-out greedy, and per fitness candidates/s (median) and the candidates' fitness values.

    The variants' scorers live side by side and the timed rounds alternate between them, so a change in the
    machine's load (shared cores) hits every variant alike instead of whichever happened to run then.
    """
    out: dict[str, dict] = {name: {} for name, _, _ in variants}
    for fitness in fitnesses:
        scorers = {}
        for name, quant, merged in variants:
            run = cfg.model_copy(deep=True)
            run.model = run.model.model_copy(update={"quantization": quant})
            spec = scoring_spec(run, splits, adapter, ship_adapter=False)
            scorer = scorers[name] = CandidateScorer(dataclasses.replace(spec, fitness=fitness, merged=merged))
            model = scorer.generator.model
            out[name]["base_quantised"] = is_quantized(model.get_submodule(_first_base(model)).weight)
            if held_out and "held_out_greedy" not in out[name]:  # before any score(): no merged weights yet
                s = cfg.sampling
                acc = greedy_accuracy(scorer.generator, splits.eval, s.max_new_tokens, judge_for(cfg.eval))
                out[name]["held_out_greedy"] = acc
            scorer.score(0, xs[0], batch, 0)  # warm-up
        rates: dict[str, list[float]] = {name: [] for name in scorers}
        for _ in range(repeats):
            for name, scorer in scorers.items():
                t0 = time.perf_counter()
                values = [scorer.score(i, x, batch, 0)[1] for i, x in enumerate(xs)]
                rates[name].append(len(xs) / (time.perf_counter() - t0))
                out[name][f"{fitness}_values"] = np.array(values)
        for name in scorers:
            out[name][f"{fitness}_candidates_per_s"] = round(float(np.median(rates[name])), 2)
        del scorers, scorer, model
    return out


def _first_base(model) -> str:
    return next(n for n, m in model.named_modules() if n.endswith("q_proj.base_layer"))


def bench_model(label, cfg, splits, adapter, args, held_out, candidates) -> dict:
    rng = np.random.default_rng(0)
    batch = MinibatchSampler(len(splits.train), args.minibatch, 0).next()
    probe = CandidateScorer(scoring_spec(cfg, splits, adapter, ship_adapter=False))
    xs = rng.normal(0, cfg.essa.sigma0, (candidates, probe.ready()[0])).astype(np.float32)
    del probe
    device = cfg.model.device if cfg.model.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = measure(
        cfg, splits, adapter, variants(device, cfg.model.dtype), xs, batch, args.repeats, args.fitness, held_out
    )
    ref = rows["float32 merged"]
    print(f"\n({label})  d={xs.shape[1]}  {candidates} candidates x {args.repeats} repeats  b={args.minibatch}")
    print(f"{'':36}" + "".join(f"{n:>19}" for n in rows))
    lines = [("base weights quantised", lambda r: str(r["base_quantised"]))]
    if held_out:
        lines.append(("held-out greedy (SFT point)", lambda r: f"{r['held_out_greedy']:.4f}"))
    for f in args.fitness:
        rate, vals = f + "_candidates_per_s", f + "_values"
        lines += [
            (f"{f} cand/s", lambda r, k=rate: f"{r[k]:.2f}"),
            (f"{f} cand/s vs float32 merged", lambda r, k=rate: f"{r[k] / ref[k]:.2f}x"),
            (f"{f} max |diff| vs float32", lambda r, k=vals: f"{np.abs(r[k] - ref[k]).max():.2e}"),
            (f"{f} rank corr vs float32", lambda r, k=vals: f"{spearman(r[k], ref[k]):.3f}"),
        ]
    for text, fn in lines:
        print(f"{text:36}" + "".join(f"{fn(r):>19}" for r in rows.values()))
    return {n: {k: v for k, v in r.items() if not k.endswith("_values")} for n, r in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-essa.yaml")
    ap.add_argument("--models", nargs="+", choices=("tiny", "large"), default=["tiny", "large"])
    ap.add_argument("--fitness", nargs="+", default=["answer_logprob", "accuracy"])
    ap.add_argument("--candidates", type=int, default=16, help="per timed round, tiny model")
    ap.add_argument("--large-candidates", type=int, default=6, help="per timed round, large model (~1 s each)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--minibatch", type=int, default=128)
    ap.add_argument("--large", type=int, nargs=2, default=[8, 512], metavar=("LAYERS", "WIDTH"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, [])
    splits = prepare_splits(cfg.data)
    summary = {}
    if "tiny" in args.models:
        adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
        label = "a: builtin:tiny + SFT adapter"
        summary["tiny"] = bench_model(label, cfg, splits, adapter, args, True, args.candidates)
    if "large" in args.models:
        big, adapter = large_model(cfg, *args.large)
        label = f"b: random Llama {args.large[0]} layers x {args.large[1]} + random LoRA"
        summary["large"] = bench_model(label, big, splits, adapter, args, False, args.large_candidates)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
