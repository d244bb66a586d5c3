"""The four speed ratios on SmolLM2-135M-Instruct (the GGUF base of configs/smollm2*.yaml), side by side from one run.

    .venv/bin/python bench/smollm2_speed.py [--steps 5] [--population 8] [--minibatch 32] [--problems 32]
        [--samples 8] [--repeats 3] [--out FILE]

Runs three benches one after the other on the same machine, each on this model and its cached SFT start, and
prints their ratios in one table:

- GRPO step, TRL's GRPOTrainer over ours (bench/grpo_vs_trl.py on configs/smollm2-fgrpo.yaml: same G, prompts,
  max tokens and LoRA; gamma 0 on ours, TRL has no focal weight); median step time over steps 2..N;
- ESSA population scoring over plain batch inference of the same greedy sequences (bench/engine_throughput.py
  on configs/smollm2-essa.yaml with the paper's black-box fitness, greedy accuracy: `essa.fitness=accuracy` and
  `essa.fitness_temperature=0`; the gray-box fitness the preset uses decodes nothing, so it has no generation to
  compare with);
- pass@k evaluation over raw `generate` of the same sequences (bench/eval_throughput.py on configs/smollm2.yaml,
  the base model);
- vLLM (CPU build) against transformers: ESSA candidates/s and GRPO rollout tokens/s (engine_throughput.py's
  engines and rollouts parts), reported; on CPU vLLM is a correctness harness, its speed is for a GPU.

The sizes are small so that the whole run fits in about 30 minutes on 2 CPU cores; the ratios, not the absolute
rates, are the result. Prints each bench's own output, then the table and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def run_bench(script: str, args: list[str]) -> dict:
    """Run bench/<script> with args in a process of its own (each loads its models afresh); its last JSON line."""
    cmd = [sys.executable, str(BENCH / script), *args]
    print("$", " ".join(cmd[1:]), flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    print(out, end="", flush=True)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps on each side (the first is not timed)")
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--minibatch", type=int, default=32)
    ap.add_argument("--groups", type=int, default=8, help="GRPO rollout groups (G = 8) for the engines' rates")
    ap.add_argument("--problems", type=int, default=32, help="held-out problems of the evaluation bench")
    ap.add_argument("--samples", type=int, default=8, help="samples per problem of the evaluation bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON line here")
    args = ap.parse_args()

    started, load_before = time.time(), os.getloadavg()
    trl = run_bench("grpo_vs_trl.py", ["-c", "configs/smollm2-fgrpo.yaml", "--steps", str(args.steps),
                                       "--print-every", "1", "--held-out", "0"])  # fmt: skip
    # a KV cache of 0.5 GiB for vLLM: 0.05 GiB cannot hold one 8,192-token sequence of this model
    engines = run_bench("engine_throughput.py", [
        "-c", "configs/smollm2-essa.yaml", "--set", "essa.fitness=accuracy", "--set", "essa.fitness_temperature=0",
        "--population", str(args.population), "--minibatch", str(args.minibatch), "--groups", str(args.groups),
        "--batch-sizes", "64,256", "--repeats", str(args.repeats),
        "--kv-cache-gib", "0.5"])  # fmt: skip
    evaluation = run_bench("eval_throughput.py", [
        "-c", "configs/smollm2.yaml", "--problems", str(args.problems), "--samples", str(args.samples),
        "--repeats", str(args.repeats)])  # fmt: skip
    ratios = {
        "grpo_step_trl_over_ours": trl["trl_over_ours"],
        "essa_population_over_plain_inference": engines["batched_over_plain_inference"],
        "passk_evaluation_over_raw_generate": evaluation["ratio"],
        "vllm_over_transformers_essa_candidates": round(
            engines["essa_candidates_per_s_vllm"] / engines["essa_candidates_per_s_transformers"], 3),
        "vllm_over_transformers_rollout_tokens": round(
            engines["grpo_rollout_tokens_per_s_vllm"] / engines["grpo_rollout_tokens_per_s_transformers"], 3),
    }  # fmt: skip
    targets = {"grpo_step_trl_over_ours": 2.0, "essa_population_over_plain_inference": 0.95,
               "passk_evaluation_over_raw_generate": 1.5}  # fmt: skip
    print(f"\n{'ratio':<42} {'value':>7} {'target':>7}")
    for key, value in ratios.items():
        target = f">= {targets[key]}" if key in targets else "report"
        print(f"{key:<42} {value:>7.3f} {target:>7}")
    row = {"model": "builtin:smollm2-135m-instruct", "ratios": ratios, "trl": trl, "engines": engines,
           "evaluation": evaluation, "wall_s": round(time.time() - started),
           "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps(row, indent=1))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
