"""Both engines side by side on one model and one set of prompts: ESSA candidates/s and GRPO rollout tokens/s.

    .venv/bin/python bench/engine_throughput.py [--population 16] [--minibatch 128] [--groups 32]

On the embedded tiny model (SFT adapter of configs/tiny.yaml, trained or taken from the cache): an ESSA population
of relative offsets scored greedily on the same minibatch by a transformers scorer (candidate by candidate) and by
a vLLM scorer (the whole population in one engine batch, an adapter per candidate), then GRPO rollouts of the same
prompt groups (G = 8, temperature 1) drawn by the transformers engine and by vLLM after a policy sync. Prints one
JSON line: candidates/s, rollout tokens/s, and the fitness agreement of the two engines. On CPU vLLM is a
correctness harness and slower; `bench/gpu_check.py --parts engines` measures the same on a GPU.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.generation.config import VLLMConfig
from essaflow.grpo.engine import PolicyEngine
from essaflow.grpo.rollout import hash_keys, sample
from essaflow.model.loading import load_adapter, load_base_model, load_tokenizer, resolve_model_path
from essaflow.training.warm_start import cached_sft_adapter


def essa_rates(cfg, splits, adapter, population: int, minibatch: int) -> dict:
    rng = np.random.default_rng(0)
    prompt_idx = rng.choice(len(splits.train), size=minibatch, replace=False)
    out, fitness = {}, {}
    for backend in ("transformers", "vllm"):
        c = cfg.model_copy(deep=True)
        c.sampling.backend = backend
        scorer = CandidateScorer(scoring_spec(c, splits, adapter))
        xs = (rng.standard_normal((population, scorer.svd.dimension)) * cfg.essa.sigma0).astype(np.float32)
        scorer.score_range(xs[:2], 0, prompt_idx, 0)  # warm-up (the engine's first adapters, allocator)
        t0 = time.perf_counter()
        fitness[backend], _ = scorer.score_range(xs, 0, prompt_idx, 0)
        out[f"essa_candidates_per_s_{backend}"] = round(population / (time.perf_counter() - t0), 3)
        rng = np.random.default_rng(0)  # the same candidates for the second engine
        rng.choice(len(splits.train), size=minibatch, replace=False)
    same = np.isclose(fitness["transformers"], fitness["vllm"])
    out["essa_fitness_identical_share"] = round(float(same.mean()), 3)
    out["essa_fitness_max_abs_diff"] = round(float(np.max(np.abs(np.subtract(*fitness.values())))), 4)
    return out


def rollout_rates(cfg, splits, adapter, groups: int, group_size: int = 8) -> dict:
    model = load_adapter(load_base_model(cfg.model), adapter)
    tok = load_tokenizer(cfg.model)
    prompts = [p.prompt for p in splits.train[:groups] for _ in range(group_size)]
    keys = hash_keys(7, torch.arange(len(prompts)))
    cap, fmt = cfg.sampling.max_new_tokens, cfg.data.prompt_format()
    engine = PolicyEngine(resolve_model_path(cfg.model.name_or_path), cfg.model.dtype, cfg.sampling.vllm, "lora",
                          cfg.model.lora_rank)  # fmt: skip
    engine.sync(model)
    out = {}
    for name, draw in (("transformers", sample), ("vllm", engine.draw)):
        draw(model, tok, prompts[:16], keys[:16], 1.0, 1.0, cap, fmt)  # warm-up
        t0 = time.perf_counter()
        r = draw(model, tok, prompts, keys, 1.0, 1.0, cap, fmt)
        out[f"grpo_rollout_tokens_per_s_{name}"] = round(int(r.completion_mask.sum()) / (time.perf_counter() - t0), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--kv-cache-gib", type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(
        "configs/tiny-essa.yaml", [f"essa.population={args.population}", f"essa.minibatch={args.minibatch}"]
    )
    cfg.sampling.vllm = VLLMConfig(kv_cache_gib=args.kv_cache_gib, gpu_memory_utilization=0.05)
    splits = prepare_splits(cfg.data)
    adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    row = {"model": cfg.model.name_or_path, "population": args.population, "minibatch": args.minibatch}
    row |= essa_rates(cfg, splits, adapter, args.population, args.minibatch)
    row |= rollout_rates(cfg, splits, adapter, args.groups)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
