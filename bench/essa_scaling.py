"""ESSA population scaling and communication, measured in one run.

1. Candidates/s with 1 and with 2 Ray workers on the same work: the same candidate vectors (drawn once from
   N(0, sigma0^2 I)), the same minibatches, the same seeds. The fitnesses must come out identical; the bench checks.
2. Bytes per generation that ESSA moves (candidate vectors + prompt ids out, (index, fitness) back, serialized
   payload sizes as counted by `population.py`) against what one GRPO step would all-reduce for the same LoRA:

       grpo_bytes = 4 bytes (fp32) x trainable LoRA parameters x 2

   A ring all-reduce of M bytes sends and receives 2 (G - 1) / G x M bytes per worker (reduce-scatter then
   all-gather; docs/algorithms.md sec. 2.8 latency model), which tends to 2 M as G grows; the factor 2 takes that limit.
   The paper's seed-synchronised scheme (every worker regenerates the population from a shared seed) would move
   only 8 bytes per worker per generation (seed + fp32 reward; docs/algorithms.md sec. 2.8), printed for reference.

    .venv/bin/python bench/essa_scaling.py -c configs/tiny-essa.yaml --generations 4
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import ray
import torch

from essaflow.config import load_config
from essaflow.essa.minibatch import MinibatchSampler
from essaflow.essa.population import RayPopulation
from essaflow.essa.svd_lora import SVDLoRA
from essaflow.essa.trainer import generation_seed, scoring_spec
from essaflow.models import load_model_with_adapter
from essaflow.warm_start import cached_sft_adapter, prepare_splits


def measure(spec, workers: int, candidates: list[np.ndarray], batches: list[np.ndarray], inflight: int) -> dict:
    pool = RayPopulation(spec, workers=workers, inflight=inflight)
    try:
        pool.evaluate(candidates[0], batches[0], seed=0)  # warm-up: first-call allocations, not timed
        fitness, walls, sent, received, per_worker = [], [], [], [], np.zeros(workers, dtype=int)
        for g, (x, idx) in enumerate(zip(candidates, batches)):
            f, stats = pool.evaluate(x, idx, generation_seed(0, g))
            fitness.append(f)
            walls.append(stats.wall_s)
            sent.append(stats.bytes_sent)
            received.append(stats.bytes_received)
            per_worker += stats.per_worker
    finally:
        pool.close()
    n = sum(len(x) for x in candidates)
    return {
        "workers": workers,
        "candidates_per_s": round(n / sum(walls), 2),
        "generation_s": round(float(np.mean(walls)), 3),
        "bytes_sent_per_generation": float(np.mean(sent)),
        "bytes_received_per_generation": float(np.mean(received)),
        "bytes_per_generation": float(np.mean(sent) + np.mean(received)),
        "candidates_per_worker": per_worker.tolist(),
        "fitness": np.concatenate(fitness),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-essa.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. essa.population=48")
    ap.add_argument("--generations", type=int, default=4, help="timed generations per worker count")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.config, args.set)
    e = cfg.essa
    splits = prepare_splits(cfg.data)
    adapter = cached_sft_adapter(cfg, splits)
    model, _ = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, e.alpha)
    lora_params = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    del model

    rng = np.random.default_rng(e.seed)
    sampler = MinibatchSampler(len(splits.train), e.minibatch, e.seed)
    candidates = [rng.normal(0.0, e.sigma0, (e.population, svd.dimension)) for _ in range(args.generations)]
    batches = [sampler.next() for _ in range(args.generations)]
    spec = scoring_spec(cfg, splits, adapter)

    ray.init(num_cpus=max(2, max(args.workers)), include_dashboard=False, log_to_driver=False)
    try:
        runs = [measure(spec, w, candidates, batches, e.inflight_per_worker) for w in args.workers]
    finally:
        ray.shutdown()
    same = all(np.array_equal(runs[0]["fitness"], r["fitness"]) for r in runs[1:])
    grpo_bytes = 4 * lora_params * 2
    essa_bytes = runs[0]["bytes_per_generation"]

    print(f"\nESSA scaling  d={svd.dimension}  population={e.population}  minibatch b={e.minibatch}  "
          f"{args.generations} timed generations  (identical fitness across worker counts: {same})")  # fmt: skip
    header = f"{'':38}" + "".join(f"{str(r['workers']) + ' worker(s)':>16}" for r in runs)
    print(header)
    for key, label in [
        ("candidates_per_s", "candidates / s"),
        ("generation_s", "wall s / generation"),
        ("bytes_per_generation", "ESSA bytes / generation"),
        ("candidates_per_worker", "candidates per worker (dynamic)"),
    ]:
        print(f"{label:38}" + "".join(f"{str(r[key]):>16}" for r in runs))
    speedup = runs[-1]["candidates_per_s"] / runs[0]["candidates_per_s"]
    label = f"speed-up {runs[-1]['workers']} vs {runs[0]['workers']} worker(s)"
    print(f"{label:38}{speedup:>16.2f}")
    print(f"\ntrainable LoRA parameters             {lora_params:>16,}")
    print(f"GRPO all-reduce bytes / step          {grpo_bytes:>16,}   (4 B x params x 2, ring all-reduce)")
    print(f"ESSA bytes / generation               {essa_bytes:>16,.0f}   (vectors + prompt ids out, fitness back)")
    print(f"GRPO / ESSA                           {grpo_bytes / essa_bytes:>16.1f}x")
    print(f"seed-synchronised ESSA (paper)        {8 * max(args.workers):>16,}   (8 B x workers: seed + reward)")
    summary = {
        "dimension": svd.dimension,
        "population": e.population,
        "minibatch": e.minibatch,
        "identical_fitness": same,
        "runs": [{k: v for k, v in r.items() if k != "fitness"} for r in runs],
        "speedup": round(speedup, 3),
        "lora_params": lora_params,
        "grpo_allreduce_bytes_per_step": grpo_bytes,
        "essa_bytes_per_generation": essa_bytes,
        "grpo_over_essa": round(grpo_bytes / essa_bytes, 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
