"""Measure the SFT start of a task setting: greedy and pass@k at n samples per problem, with timings.

.venv/bin/python bench/hard_task.py -c configs/tiny.yaml --set data.synthetic.max_digits=4 sft.steps=200
"""

from __future__ import annotations

import argparse
import json
import os
import time

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.judging.model_eval import evaluate_output
from essaflow.training.warm_start import cached_sft_adapter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="configs/tiny.yaml")
    ap.add_argument("--set", nargs="*", default=[], help="dotted overrides")
    ap.add_argument("--no-eval", action="store_true")
    args = ap.parse_args()
    cfg = load_config(args.config, args.set)
    splits = prepare_splits(cfg.data)
    t0 = time.perf_counter()
    sft = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    sft_s = time.perf_counter() - t0
    row = {"set": args.set, "sizes": [len(splits.sft), len(splits.train), len(splits.eval)],
           "sft_s": round(sft_s, 1), "load": os.getloadavg()[0]}  # fmt: skip
    if not args.no_eval:
        rep = evaluate_output(cfg.model, sft, "lora", splits.eval, cfg.eval, cfg.sampling)
        counts = sorted(rep.correct_counts)
        row.update({k: round(v, 3) for k, v in rep.summary().items()})
        row.update({"eval_s": rep.wall_s, "seq_per_s": rep.sequences_per_s, "trunc": rep.truncated_share,
                    "zero_share": round(sum(c == 0 for c in counts) / len(counts), 3),
                    "load_after": os.getloadavg()[0]})  # fmt: skip
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
