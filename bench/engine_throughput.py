"""Both engines side by side on one model and one set of prompts: ESSA candidates/s and GRPO rollout tokens/s; and
on the transformers engine, a population scored in shared batches against candidate by candidate and against plain
batch inference of the same sequences.

    .venv/bin/python bench/engine_throughput.py [--parts population,engines,rollouts] [--population 16]
        [--minibatch 128] [--groups 32] [--repeats 3] [--batch-sizes 128,512,2048]
        [-c configs/tiny-essa.yaml] [--set KEY=VALUE ...]

On the embedded tiny model (SFT adapter of configs/tiny.yaml, trained or taken from the cache):

- population: an ESSA population of relative offsets scored greedily on one minibatch by the transformers
  engine in shared row batches (essa.batched_scoring, at each of --batch-sizes) and candidate by candidate (merged
  weights, one batch per candidate), and the same sequences (population x minibatch prompts) generated greedily by
  the SFT model with its adapter merged (plain batch inference: its generate calls alone, on prompts tokenised
  beforehand, at each of --batch-sizes). Medians over --repeats, every variant timed once a round so that a drift
  in the machine's speed hits them alike; the ratios use each side's best batch size, and the fitness of the two
  scorings is compared.
- engines: the same population scored by a transformers scorer and by a vLLM scorer (the whole population in one
  engine batch, an adapter per candidate).
- rollouts: GRPO rollouts of the same prompt groups (G = 8, temperature 1) drawn by the transformers engine and by
  vLLM after a policy sync.

Prints one JSON line last: the parts' rates and ratios, all from this run. On CPU vLLM is a correctness harness
and slower; `bench/gpu_check.py --parts engines` measures the engines on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from functools import partial

import numpy as np
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.generation.config import VLLMConfig
from essaflow.generation.sampling import encode_prompts, model_stop_ids
from essaflow.grpo.engine import PolicyEngine
from essaflow.grpo.rollout import hash_keys, sample
from essaflow.model.loading import (
    load_adapter,
    load_base_model,
    load_model_with_adapter,
    load_tokenizer,
    resolve_model_path,
)
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


def interleaved_rates(jobs: dict, repeats: int) -> dict:
    """{key: median of count / seconds} over `repeats` rounds, every job (key -> (count, work)) timed once a round
    after one warm-up call each: a drift in the machine's speed hits every job alike, so their ratios hold."""
    for _, work in jobs.values():
        work()
    times: dict = {key: [] for key in jobs}
    for _ in range(repeats):
        for key, (count, work) in jobs.items():
            t0 = time.perf_counter()
            work()
            times[key].append(count / (time.perf_counter() - t0))
    return {key: statistics.median(v) for key, v in times.items()}


def plain_inference_jobs(cfg, adapter, prompts: list[str], sizes: list[int]) -> dict:
    """Greedy batch inference of `prompts` by the SFT model (adapter merged), per batch size: the generate calls
    alone, on prompts tokenised beforehand (the strictest reference: no reward, no tokenising)."""
    model, tok = load_model_with_adapter(cfg.model, adapter)
    plain = model.merge_and_unload()
    enc = encode_prompts(tok, prompts, cfg.data.prompt_format())
    kw = {"do_sample": False, "max_new_tokens": cfg.sampling.max_new_tokens, "pad_token_id": tok.pad_token_id,
          "eos_token_id": model_stop_ids(plain, tok)}  # fmt: skip

    @torch.no_grad()
    def generate(size: int) -> None:
        for start in range(0, len(prompts), size):
            plain.generate(**{k: v[start : start + size] for k, v in enc.items()}, **kw)

    return {("plain", size): (len(prompts), partial(generate, size)) for size in sizes}


def scoring_jobs(spec, xs, prompt_idx, sizes: list[int]) -> tuple[dict, dict]:
    """One-by-one scoring (key "one_by_one") and batched scoring (per batch size) as jobs, and their fitnesses."""
    jobs, fitness = {}, {}
    variants = [("one_by_one", dataclasses.replace(spec, batched=False))]
    variants += [(size, dataclasses.replace(spec, batched=True, batch_size=size)) for size in sizes]
    for key, variant in variants:
        scorer = CandidateScorer(variant)
        work = partial(scorer.score_range, xs, 0, prompt_idx, 0)
        fitness[key] = work()[0]
        jobs[("scored", key)] = (len(xs), work)
    return jobs, fitness


def population_rates(cfg, splits, adapter, population: int, minibatch: int, sizes: list[int], repeats: int) -> dict:
    """Candidates/s of batched and one-by-one scoring, and their ratios to plain inference of the same sequences."""
    rng = np.random.default_rng(0)
    prompt_idx = rng.choice(len(splits.train), size=minibatch, replace=False)
    c = cfg.model_copy(deep=True)
    c.sampling.backend = "transformers"
    spec = scoring_spec(c, splits, adapter)
    xs = (rng.standard_normal((population, CandidateScorer(spec).svd.dimension)) * cfg.essa.sigma0).astype(np.float32)
    jobs, fitness = scoring_jobs(spec, xs, prompt_idx, sizes)
    jobs |= plain_inference_jobs(c, adapter, [spec.prompts[i] for _ in xs for i in prompt_idx], sizes)
    measured = interleaved_rates(jobs, repeats)
    rates = {k: v for (kind, k), v in measured.items() if kind == "scored"}
    plain = {k: v for (kind, k), v in measured.items() if kind == "plain"}
    one, batched = rates.pop("one_by_one"), max(rates.values())
    best_plain = max(plain.values()) / minibatch  # sequences/s as candidates/s (minibatch sequences a candidate)
    out = {f"batched_candidates_per_s_at_{k}": round(v, 3) for k, v in rates.items()}
    out |= {f"plain_inference_seq_per_s_at_{k}": round(v, 1) for k, v in plain.items()}
    out |= {
        "one_by_one_candidates_per_s": round(one, 3),
        "batched_candidates_per_s": round(batched, 3),
        "plain_inference_candidates_per_s": round(best_plain, 3),
        "batched_over_one_by_one": round(batched / one, 3),
        "batched_over_plain_inference": round(batched / best_plain, 3),
        "one_by_one_over_plain_inference": round(one / best_plain, 3),
        "batched_fitness_equal_to_one_by_one": all(np.array_equal(fitness["one_by_one"], fitness[k]) for k in sizes),
    }
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
    parser.add_argument("--parts", default="population,engines,rollouts")
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", default="128,512,2048", help="population part: rows per batch to try")
    parser.add_argument("--kv-cache-gib", type=float, default=0.05)
    parser.add_argument("-c", "--config", default="configs/tiny-essa.yaml", help="the preset measured")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    torch.set_num_threads(1)
    cfg = load_config(
        args.config, [*args.set, f"essa.population={args.population}", f"essa.minibatch={args.minibatch}"]
    )
    cfg.sampling.vllm = VLLMConfig(kv_cache_gib=args.kv_cache_gib, gpu_memory_utilization=0.05)
    splits = prepare_splits(cfg.data)
    adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    row = {"config": args.config, "overrides": args.set, "model": cfg.model.name_or_path,
           "lora_rank": cfg.model.lora_rank, "population": args.population, "minibatch": args.minibatch}  # fmt: skip
    if "population" in parts:
        sizes = [int(s) for s in args.batch_sizes.split(",")]
        row |= population_rates(cfg, splits, adapter, args.population, args.minibatch, sizes, args.repeats)
        print(json.dumps(row), flush=True)  # each part's figures as soon as they exist: a later part may fail
    if "engines" in parts:
        row |= essa_rates(cfg, splits, adapter, args.population, args.minibatch)
        print(json.dumps(row), flush=True)
    if "rollouts" in parts:
        row |= rollout_rates(cfg, splits, adapter, args.groups)
    row["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
