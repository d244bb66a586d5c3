"""pass@k evaluation on the transformers engine against raw `generate` of the same sequences, side by side.

    .venv/bin/python bench/eval_throughput.py [-c configs/tiny.yaml] [--problems 256] [--samples 64] [--repeats 3]

The evaluation is the pipeline's own (`model_eval.evaluate_transformers`): greedy, then n samples per problem with
each prompt prefilled once (eval.shared_prompt), rewards and pass@k. The baseline generates the same sequences with
plain HF `generate`: each prompt once greedily and n times sampled (the config's temperature and top_p, top_k
off), in batches of sampling.batch_size, with the same max_new_tokens and stop ids, and neither decodes texts nor
scores them. The defaults are the tiny preset's evaluation (256 held-out problems x 64 samples + greedy, 6 new
tokens, batch 512) on its model as pretrained (`builtin:tiny`, no adapter), on one torch thread. The two alternate
within each repeat, so a change of load hits both alike.

Prints each repeat's wall times, the medians with sequences/s and their ratio (generate / evaluation: above 1 the
evaluation is faster), the load average before and after, and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.generation.prompt_format import PromptFormat
from essaflow.generation.sampling import encode_prompts, model_stop_ids
from essaflow.judging.model_eval import evaluate_transformers
from essaflow.model.loading import load_base_model, load_tokenizer


@torch.no_grad()
def raw_generate(model, tok, prompts: list[str], n: int, sampling, fmt: PromptFormat) -> None:
    """Every prompt once greedily, then n times sampled, with batched HF `generate` and nothing else."""
    stop = model_stop_ids(model, tok)
    for rows, sample in ((prompts, False), ([p for p in prompts for _ in range(n)], True)):
        enc = encode_prompts(tok, rows, fmt)
        for start in range(0, len(rows), sampling.batch_size):
            model.generate(
                input_ids=enc["input_ids"][start : start + sampling.batch_size],
                attention_mask=enc["attention_mask"][start : start + sampling.batch_size],
                do_sample=sample,
                temperature=sampling.temperature if sample else None,
                top_p=sampling.top_p if sample else None,
                top_k=0 if sample else None,
                max_new_tokens=sampling.max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=stop,
            )


def timed(fn):
    """(wall seconds, what fn returned)."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. sampling.batch_size=256")
    ap.add_argument("--problems", type=int, default=256, help="held-out problems (the preset's eval_size)")
    ap.add_argument("--samples", type=int, default=None, help="samples per problem (default: the config's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args()


def load_average(when: str) -> list[float]:
    """The 1, 5 and 15 minute load averages, printed."""
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"load average {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return load


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.set)
    n = args.samples or cfg.eval.samples_per_problem
    eval_cfg = cfg.eval.model_copy(update={"samples_per_problem": n, "ks": [k for k in cfg.eval.ks if k <= n]})
    problems = prepare_splits(cfg.data).eval[: args.problems]
    prompts, fmt, s = [p.prompt for p in problems], cfg.data.prompt_format(), cfg.sampling
    model, tok = load_base_model(cfg.model).eval(), load_tokenizer(cfg.model)
    seqs = len(problems) * (n + 1)
    print(f"{cfg.model.name_or_path}: {len(problems)} problems x ({n} samples + greedy) = {seqs} sequences, "
          f"max_new_tokens {s.max_new_tokens}, batch {s.batch_size}, T {s.temperature}, "
          f"eval.shared_prompt {eval_cfg.shared_prompt}, {args.threads} torch thread(s)")  # fmt: skip
    evaluate_transformers(model, tok, problems[:8], eval_cfg, s, fmt)  # warm-up, untimed
    raw_generate(model, tok, prompts[:8], n, s, fmt)

    load_before = load_average("before")
    print(f"{'repeat':>6} {'evaluation s':>13} {'generate s':>11}")
    evals, raws = [], []
    for r in range(args.repeats):
        eval_wall, report = timed(lambda: evaluate_transformers(model, tok, problems, eval_cfg, s, fmt))
        evals.append(eval_wall)
        raws.append(timed(lambda: raw_generate(model, tok, prompts, n, s, fmt))[0])
        print(f"{r + 1:>6} {evals[-1]:>13.2f} {raws[-1]:>11.2f}")
    load_after = load_average("after")

    eval_s, raw_s = statistics.median(evals), statistics.median(raws)
    print(f"median: evaluation {eval_s:.2f} s ({seqs / eval_s:.0f} seq/s), generate {raw_s:.2f} s "
          f"({seqs / raw_s:.0f} seq/s); ratio {raw_s / eval_s:.2f}x")  # fmt: skip
    print(f"last evaluation: greedy {report.greedy:.3f}, pass@k {report.pass_at_k}")
    summary = {
        "ratio": round(raw_s / eval_s, 3), "evaluation_s_median": round(eval_s, 3),
        "generate_s_median": round(raw_s, 3), "evaluation_s": [round(x, 3) for x in evals],
        "generate_s": [round(x, 3) for x in raws], "sequences": seqs, "problems": len(problems),
        "samples_per_problem": n, "max_new_tokens": s.max_new_tokens, "batch_size": s.batch_size,
        "shared_prompt": eval_cfg.shared_prompt, "load_before": load_before, "load_after": load_after,
    }  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
