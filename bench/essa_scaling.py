"""ESSA population scaling and communication, measured in one run, both sync modes side by side.

1. The same search (strategy from essa.seed, the same minibatches and seeds) on Ray pools of 1 and 2 workers, in
   essa.sync=seed (every worker regenerates the candidates from its strategy replica, ESSA-v3 App. A) and in
   essa.sync=vectors (the driver ships each candidate's float32 offsets). Fitness must come out identical in all
   four runs; the bench checks. Candidates/s is timed over the generations after the first (first-call
   allocations); the four settings run in rotation `--rounds` times and the medians are quoted; the machine's load
   (`uptime`) is printed, since other processes share the cores.
2. Bytes per generation each mode moves (serialized payload sizes as counted by `metrics.payload_bytes`: calls out,
   answers back, resync states included) against what one GRPO step would all-reduce for the same LoRA:

       grpo_bytes = 4 bytes (fp32) x trainable LoRA parameters x 2

   A ring all-reduce of M bytes sends and receives 2 (G - 1) / G x M bytes per worker (reduce-scatter then
   all-gather; docs/algorithms.md sec. 2.8 latency model), which tends to 2 M as G grows; the factor 2 takes that limit.
   The ratio compares seed-mode bytes summed over all workers with what each GRPO worker moves (conservative:
   per worker the seed figure is smaller still; both are printed). Seed-mode bytes do not grow with the model or
   the minibatch (only with the population, 4 bytes a candidate, and the workers, one call each), so the ratio
   shrinks as the LoRA grows; the bench prints the LoRA size from which it is 1/1000.

    .venv/bin/python bench/essa_scaling.py -c configs/tiny-essa.yaml --generations 4
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import ray
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.distributed import ray_population
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.step import run_generation, start_search
from essaflow.essa.svd_lora import SVDLoRA
from essaflow.model.loading import load_model_with_adapter
from essaflow.training.warm_start import cached_sft_adapter


def measure(spec, cfg, dimension: int, generations: int, workers: int, sync: str) -> dict:
    """One search of `generations` generations on a fresh pool (the loop's `run_generation`): fitness, timing
    and bytes per generation."""
    e = cfg.essa
    pool = ray_population(spec, workers=workers, sync=sync, inflight=e.inflight_per_worker)
    strategy, sampler = start_search(e, dimension, len(spec.prompts))
    try:
        told = [run_generation(pool, strategy, sampler, e.seed, g) for g in range(generations)]
    finally:
        pool.close()
    fitness, stats = [t.fitness for t in told], [t.stats for t in told]
    timed = stats[1:]  # generation 0 pays first-call allocations (and carries no fitness header in seed mode)
    n = sum(sum(s.per_worker) for s in timed)
    return {
        "sync": sync,
        "workers": workers,
        "candidates_per_s": round(n / sum(s.wall_s for s in timed), 2),
        "generation_s": round(float(np.mean([s.wall_s for s in timed])), 3),
        "bytes_sent_per_generation": float(np.mean([s.bytes_sent for s in timed])),
        "bytes_received_per_generation": float(np.mean([s.bytes_received for s in timed])),
        "bytes_per_generation": float(np.mean([s.bytes_total for s in timed])),
        "bytes_per_worker_generation": float(np.mean([s.bytes_total for s in timed])) / workers,
        "resyncs": sum(s.resyncs for s in stats),
        "candidates_per_worker": np.sum([s.per_worker for s in timed], axis=0).tolist(),
        "fitness": np.concatenate(fitness),
        "mean": strategy.mean,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-essa.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. essa.population=48")
    ap.add_argument("--generations", type=int, default=4, help="timed generations per run (one more is run first)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3, help="the settings run in rotation this often; medians quoted")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, args.set)
    e = cfg.essa
    splits = prepare_splits(cfg.data)
    adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    model, _ = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, e.alpha)
    lora_params = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    del model

    spec = scoring_spec(cfg, splits, adapter)
    ray.init(num_cpus=max(2, max(args.workers)), include_dashboard=False, log_to_driver=False)
    try:
        settings = [(sync, w) for sync in ("seed", "vectors") for w in args.workers]
        rounds = [[measure(spec, cfg, svd.dimension, args.generations + 1, w, s) for s, w in settings]
                  for _ in range(args.rounds)]  # fmt: skip
    finally:
        ray.shutdown()
    runs = [median_run([r[i] for r in rounds]) for i in range(len(settings))]
    report(cfg, svd.dimension, lora_params, args.generations, runs, args.rounds)


def median_run(repeats: list[dict]) -> dict:
    """One setting over its rounds: median candidates/s and wall; fitness must be the same in every round."""
    out = dict(repeats[0])
    out["candidates_per_s_rounds"] = [r["candidates_per_s"] for r in repeats]
    out["candidates_per_s"] = float(np.median(out["candidates_per_s_rounds"]))
    out["generation_s"] = float(np.median([r["generation_s"] for r in repeats]))
    out["same_fitness_every_round"] = all(np.array_equal(r["fitness"], out["fitness"]) for r in repeats)
    return out


def report(cfg, dimension: int, lora_params: int, generations: int, runs: list[dict], rounds: int) -> None:
    """The side-by-side table, the ratios and a JSON summary."""
    e = cfg.essa
    same_fitness = all(np.array_equal(runs[0]["fitness"], r["fitness"]) for r in runs[1:])
    same_fitness = same_fitness and all(r["same_fitness_every_round"] for r in runs)
    same_mean = all(np.array_equal(runs[0]["mean"], r["mean"]) for r in runs[1:])
    grpo_bytes = 4 * lora_params * 2
    by = {(r["sync"], r["workers"]): r for r in runs}
    few, many = min(r["workers"] for r in runs), max(r["workers"] for r in runs)
    seed_bytes, vector_bytes = by["seed", many]["bytes_per_generation"], by["vectors", many]["bytes_per_generation"]
    speedup = {s: by[s, many]["candidates_per_s"] / by[s, few]["candidates_per_s"] for s in ("seed", "vectors")}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nESSA scaling  d={dimension}  population={e.population}  minibatch b={e.minibatch}  {generations} "
          f"timed generations x {rounds} rounds (medians)  load: {load} on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'':34}" + "".join(f"{r['sync'] + ' x' + str(r['workers']):>16}" for r in runs) + f"{'GRPO step':>16}")
    for key, label in [
        ("candidates_per_s", "candidates / s (median)"),
        ("generation_s", "wall s / generation"),
        ("bytes_sent_per_generation", "bytes sent / generation"),
        ("bytes_received_per_generation", "bytes received / generation"),
        ("bytes_per_generation", "bytes / generation (all workers)"),
        ("bytes_per_worker_generation", "bytes / generation / worker"),
        ("resyncs", "resyncs (whole run)"),
        ("candidates_per_worker", "candidates per worker"),
    ]:
        extra = f"{grpo_bytes:>16,}" if key == "bytes_per_generation" else ""
        print(f"{label:34}" + "".join(f"{str(r[key]):>16}" for r in runs) + extra)
    print(f"\ntrainable LoRA parameters         {lora_params:>12,}   (GRPO all-reduce: 4 B x params x 2)")
    print(f"seed / GRPO bytes                 {seed_bytes / grpo_bytes:>12.5f}   (1/{grpo_bytes / seed_bytes:,.0f}; "
          f"target <= 1/1000, met from {int(seed_bytes * 1000 / 8):,} LoRA parameters)")  # fmt: skip
    print(f"vectors / GRPO bytes              {vector_bytes / grpo_bytes:>12.5f}   (1/{grpo_bytes / vector_bytes:.1f})")
    print(f"seed / vectors bytes              {seed_bytes / vector_bytes:>12.5f}")
    for sync, value in speedup.items():
        print(f"speed-up {many} vs {few} worker(s), {sync:8} {value:>8.2f}x   (target >= 1.8x)")
    print(f"identical fitness across worker counts and sync modes: {same_fitness}; identical final mean: {same_mean}")
    summary = {
        "dimension": dimension,
        "population": e.population,
        "minibatch": e.minibatch,
        "identical_fitness": same_fitness,
        "identical_mean": same_mean,
        "rounds": rounds,
        "runs": [{k: v for k, v in r.items() if k not in ("fitness", "mean")} for r in runs],
        "speedup": {k: round(v, 3) for k, v in speedup.items()},
        "lora_params": lora_params,
        "grpo_allreduce_bytes_per_step": grpo_bytes,
        "seed_bytes_per_generation": seed_bytes,
        "vectors_bytes_per_generation": vector_bytes,
        "seed_over_grpo": round(seed_bytes / grpo_bytes, 6),
        "load_avg": os.getloadavg(),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
