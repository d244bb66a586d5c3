"""HumanEval pass@k of a base model and of adapters tuned on another task, side by side: what tuning cost in code.

    .venv/bin/python bench/humaneval_forgetting.py [-c configs/smollm2-humaneval.yaml] [--problems 164]
        [--samples 10] [--adapter NAME=DIR ...] [--set KEY=VALUE ...]

Each model is scored with the pipeline's evaluation on the same HumanEval problems (the first --problems of the
package's 164, in its order), the same samples and seed, judged by `code_tests` in the sandbox; the adapters sit on
the config's base (an adapter directory: an SFT start, or a tuned adapter from a run's store). Prints a markdown
table and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/smollm2-humaneval.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. sampling.max_new_tokens=256")
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--adapter", action="append", default=[], metavar="NAME=DIR", help="an adapter to score too")
    args = ap.parse_args()

    from essaflow.config import load_config
    from essaflow.data.humaneval import humaneval_problems
    from essaflow.judging.model_eval import evaluate_adapter

    ks = sorted({1, args.samples})
    cfg = load_config(args.config, [f"eval.samples_per_problem={args.samples}", f"eval.ks={ks}", *args.set])
    problems = humaneval_problems()[: args.problems]
    models = [("base", None)] + [(n, Path(d)) for n, d in (a.split("=", 1) for a in args.adapter)]
    print(f"{cfg.model.name_or_path} on HumanEval: {len(problems)} problems x {args.samples} samples at temperature "
          f"{cfg.sampling.temperature}, at most {cfg.sampling.max_new_tokens} new tokens, code_tests in the sandbox; "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"| model | greedy | pass@1 | pass@{args.samples} | truncated | s |\n|---|---|---|---|---|---|")
    out = {}
    for name, adapter in models:
        start = time.perf_counter()
        report = evaluate_adapter(cfg.model, adapter, problems, cfg.eval, cfg.sampling, cfg.data.prompt_format())
        s = report.summary()
        out[name] = {k: round(v, 4) for k, v in s.items()}
        print(f"| {name} | {s['greedy']:.3f} | {s['pass@1']:.3f} | {s[f'pass@{args.samples}']:.3f} | "
              f"{report.truncated_share:.2f} | {time.perf_counter() - start:.0f} |", flush=True)  # fmt: skip
    print(json.dumps({"problems": len(problems), "samples": args.samples, "scores": out}))


if __name__ == "__main__":
    main()
