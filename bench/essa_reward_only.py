"""ESSA from the task reward alone: which search settings learn, measured side by side from one SFT start.

Every setting is run for each seed from the same cached SFT adapter, then evaluated with the preset's pass@k
protocol on the held-out split (paired: same eval seed). Printed per run and as a per-setting mean: held-out greedy
and pass@1 gains over the SFT start, the mean tie share of the fitness (1 - distinct values / population), the
fitness spread, and training wall time. Fitness is always a black-box reward (essa.fitness=accuracy) unless a
setting overrides it. Settings are dotted overrides on the preset, separated by spaces, one setting per --setting:

    .venv/bin/python bench/essa_reward_only.py -c configs/tiny-essa.yaml --seeds 0 1 \\
        --setting "essa.strategy=cma essa.sigma0=0.1" \\
        --setting "essa.strategy=es essa.offsets=relative essa.fitness_shaping=centered_rank essa.es_lr=0.02"
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.loop import train_essa
from essaflow.judging.model_eval import evaluate_output
from essaflow.training.warm_start import cached_sft_adapter


def run_one(cfg, splits, sft, before, seed: int) -> dict:
    run_cfg = cfg.model_copy(update={"essa": cfg.essa.model_copy(update={"seed": seed})})
    with tempfile.TemporaryDirectory(prefix="essa-bench-") as tmp:
        t0 = time.perf_counter()
        result = train_essa(run_cfg, splits, sft, Path(tmp))
        wall = time.perf_counter() - t0
        after = evaluate_output(cfg.model, result.output_dir, "lora", splits.eval, cfg.eval, cfg.sampling)
    gens = [m for m in result.metrics if "tie_share" in m]
    return {
        "seed": seed,
        "greedy": round(100 * (after.greedy - before.greedy), 1),
        "pass@1": round(100 * (after.pass_at_k["1"] - before.pass_at_k["1"]), 1),
        "tie_share": round(float(np.mean([m["tie_share"] for m in gens])), 3),
        "fitness_std": round(float(np.mean([m["fitness_std"] for m in gens])), 4),
        "train_s": round(wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="configs/tiny-essa.yaml")
    ap.add_argument("--setting", action="append", default=[], help="space-separated dotted overrides")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--json", help="also write every run as JSON lines here")
    args = ap.parse_args()
    base = load_config(args.config, ["essa.eval_every=0", "essa.checkpoint_every=0"])
    splits = prepare_splits(base.data)
    sft = cached_sft_adapter(base.model, base.sft, splits, base.data.prompt_format())
    before = evaluate_output(base.model, sft, "lora", splits.eval, base.eval, base.sampling)
    print(f"SFT start: greedy {before.greedy:.3f}  pass@1 {before.pass_at_k['1']:.3f}", flush=True)
    rows = []
    for setting in args.setting or [""]:
        cfg = load_config(args.config, ["essa.eval_every=0", "essa.checkpoint_every=0", *setting.split()])
        for seed in args.seeds:
            row = {"setting": setting or "(preset)", "fitness": cfg.essa.fitness_kind}
            row.update(run_one(cfg, splits, sft, before, seed))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    print(f"\n{'setting':90} {'seeds':>5} {'greedy':>7} {'pass@1':>7} {'ties':>6} {'train_s':>8}")
    for setting in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == setting]
        mean = {k: float(np.median([r[k] for r in mine])) if k == "train_s" else float(np.mean([r[k] for r in mine]))
                for k in ("greedy", "pass@1", "tie_share", "train_s")}  # fmt: skip
        print(f"{setting[:90]:90} {len(mine):>5} {mean['greedy']:>+7.1f} {mean['pass@1']:>+7.1f} "
              f"{mean['tie_share']:>6.2f} {mean['train_s']:>8.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
