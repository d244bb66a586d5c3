"""ESSA's Ray workers on the vLLM engine (the CPU build): each seed-synchronised worker scores its share of the
population in an engine of its own; a worker killed mid-generation is restarted by Ray (its engine started again),
given the strategy state once, and the generation loses and double-counts nothing."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.distributed import ray_population
from essaflow.essa.population import LocalPopulation
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.step import run_generation, start_search
from essaflow.training.warm_start import cached_sft_adapter
from tests.support import essa_tiny

pytestmark = pytest.mark.vllm

ESSA = [
    "method=essa", "sampling.backend=vllm", "essa.population=8", "essa.minibatch=16", "essa.offsets=relative",
    "essa.sigma0=0.3", "sampling.vllm.kv_cache_gib=0.05", "sampling.vllm.gpu_memory_utilization=0.05",
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with essa_tiny.local_ray(sys.modules[__name__]):  # the crashing scorer below travels by value
        yield


@pytest.fixture(scope="module")
def tiny():
    """The tiny model's short SFT start (the engine module's, from the shared cache) and an ESSA config on vLLM."""
    data = ["data.synthetic.num_problems=1500", "data.eval_size=48", "sft.steps=100"]
    cfg = load_config("configs/tiny.yaml", [*data, *ESSA])
    splits = prepare_splits(cfg.data)
    return cfg, splits, cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())


class CrashOnce(CandidateScorer):
    """A scorer whose process dies (os._exit) the first time anyone is handed candidate 3 to score."""

    marker = ""

    def score_range(self, xs, start, prompt_idx, seed):
        if start <= 3 < start + len(xs) and essa_tiny.first_to_claim(self.marker):
            os._exit(1)
        return super().score_range(xs, start, prompt_idx, seed)


def test_a_worker_killed_mid_generation_on_vllm_restarts_its_engine_and_loses_nothing(tiny, tmp_path, caplog):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    assert spec.backend == "vllm"
    CrashOnce.marker = str(tmp_path / "crashed")
    caplog.set_level(logging.INFO, logger="essaflow.essa.distributed")
    pool = ray_population(spec, workers=2, sync="seed", worker_class=CrashOnce)
    strategy, sampler = start_search(cfg.essa, pool.dimension, len(splits.train))
    told, rejoined = [], None
    try:
        for g in range(40):  # until the restarted worker is back and has scored a whole generation again
            told.append(run_generation(pool, strategy, sampler, cfg.essa.seed, g))
            if rejoined is None and " is back, on node " in caplog.text:
                rejoined = g
            elif rejoined is not None:
                break
    finally:
        pool.close()
    stats = [t.stats for t in told]
    assert Path(CrashOnce.marker).exists() and stats[0].worker_failures == 1 and stats[0].redispatched >= 1
    assert rejoined is not None and len(told) == rejoined + 2, (rejoined, len(told))
    assert all(sum(s.per_worker) == 8 and s.duplicates_dropped == 0 for s in stats), "each candidate scored once"
    assert sum(s.resyncs for s in stats) == 1, "the restarted worker was given the state once"
    assert min(stats[-1].per_worker) > 0, "the rejoined worker takes candidates again"
    # generation 0's candidates scored in this process's engine: the same fitness, whoever scored which share
    local = LocalPopulation(spec)
    s2, m2 = start_search(cfg.essa, local.dimension, len(splits.train))
    again = run_generation(local, s2, m2, cfg.essa.seed, 0).fitness
    assert list(again) == pytest.approx(list(told[0].fitness), abs=1.5 / 16), (again, told[0].fitness)
    print(f"vLLM workers: killed in generation 0, back in {rejoined}, {len(told)} generations; "
          f"generation 0 fitness {list(told[0].fitness)} vs one engine {list(again)}")  # fmt: skip
