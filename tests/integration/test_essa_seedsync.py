"""essa.sync=seed on a real local Ray (ESSA-v3 App. A): workers regenerate the candidates from their strategy
replicas; seed and vectors modes and 1 or 2 workers give the same run; replicas stay in agreement; a perturbed
replica is caught and resynced; a worker killed mid-generation loses and double-counts nothing and rejoins from the
state; a killed run resumes bitwise."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from essaflow.essa.distributed import ray_population
from essaflow.essa.loop import train_essa
from essaflow.essa.population import LocalPopulation
from essaflow.essa.replica import ReplicaScorer
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.step import run_generation, start_search
from essaflow.storage.checkpoint_dirs import latest_checkpoint
from tests.support import essa_tiny
from tests.support.essa_tiny import make_tiny
from tests.support.strategies import move_mean

pytestmark = pytest.mark.integration

TRACE = ("generation", "fitness_mean", "fitness_max", "fitness_min", "sigma", "mean_norm")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with essa_tiny.local_ray(sys.modules[__name__]):  # the fault-injecting scorers below travel by value
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("essa-seed"), ["essa.workers.ray=true", "essa.population=12"])


def configured(cfg, **essa):
    run = cfg.model_copy(deep=True)
    run.essa = run.essa.model_copy(update={"eval_every": 0, **essa})
    return run


def trace(metrics):
    return [{k: m[k] for k in TRACE if k in m} for m in metrics if "fitness_mean" in m]


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    """The same 4-generation search four ways: seed / vectors x 1 / 2 workers."""
    cfg, splits, adapter = tiny
    out = {}
    for sync in ("seed", "vectors"):
        for count in (1, 2):
            run = configured(cfg, sync=sync, workers=cfg.essa.workers.model_copy(update={"count": count}))
            out[sync, count] = train_essa(run, splits, adapter, tmp_path_factory.mktemp(f"{sync}-{count}"))
    return out


def test_seed_and_vectors_modes_and_worker_counts_give_the_same_run(runs):
    reference = runs["vectors", 1]
    offsets = np.load(reference.output_dir / "essa_offsets.npy")
    assert np.any(offsets != 0), "the search moved"
    for key, result in runs.items():
        assert trace(result.metrics) == trace(reference.metrics), key
        assert np.array_equal(np.load(result.output_dir / "essa_offsets.npy"), offsets), key
    assert all(min(m["per_worker"]) > 0 for m in runs["seed", 2].metrics), "both workers took candidates"
    seed_bytes, vector_bytes = runs["seed", 2].bytes_per_update, runs["vectors", 2].bytes_per_update
    assert seed_bytes < vector_bytes / 5, f"seed mode moves far less: {seed_bytes} vs {vector_bytes} bytes"


def test_seed_mode_moves_a_few_bytes_per_candidate_whatever_the_model(tiny, runs):
    """One call and one answer per worker a generation, 4 bytes a candidate each way plus under 96 bytes of
    envelope: independent of the model and the minibatch (at population 32 that is under 1/1000 of a GRPO
    all-reduce for configs/tiny-essa.yaml's LoRA: tests/unit/essa/test_replica.py, bench/essa_scaling.py)."""
    cfg, _, _ = tiny
    per_generation = [m["bytes"] for m in runs["seed", 2].metrics if "bytes" in m][1:]  # after the first draw
    assert max(per_generation) <= 2 * (96 + 4 * cfg.essa.population), per_generation


def test_replicas_stay_in_agreement_over_a_run(runs):
    for count in (1, 2):
        assert [m["resyncs"] for m in runs["seed", count].metrics] == [0] * 4, "no state ever re-sent"


def search(population, cfg, splits, dimension: int, generations: int, until=None):
    """The trainer's generation step on a given population: the fitness of every generation, the final mean and
    the scoring stats."""
    e = cfg.essa
    strategy, sampler = start_search(e, dimension, len(splits.train))
    told = []
    for g in range(generations):
        told.append(run_generation(population, strategy, sampler, e.seed, g))
        if until is not None and until():
            break
    return [t.fitness for t in told], strategy.mean, [t.stats for t in told]


class PerturbedReplica(ReplicaScorer):
    """A seed-mode replica whose mean moves by a rounding error once, at generation 2 (another CPU's floats)."""

    marker = ""

    def replica_at(self, generation, others, state):
        replica = super().replica_at(generation, others, state)
        if generation == 2 and essa_tiny.first_to_claim(self.marker):  # one worker, even when both get here at once
            move_mean(replica.strategy, 1e-12)
        return replica


class PerturbOnce(CandidateScorer):
    """A scorer whose seed-mode replica is a `PerturbedReplica`."""

    marker = ""

    def load(self, spec):
        super().load(spec)
        self.replica = PerturbedReplica(spec.search, self.svd.dimension, len(spec.prompts))
        self.replica.marker = self.marker


def test_a_perturbed_replica_is_detected_and_resynced(tiny, tmp_path):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    local = LocalPopulation(spec)
    expected, expected_mean, _ = search(local, cfg, splits, local.dimension, 4)
    PerturbOnce.marker = str(tmp_path / "perturbed")
    pool = ray_population(spec, workers=2, sync="seed", worker_class=PerturbOnce)
    try:
        fitness, mean, stats = search(pool, cfg, splits, pool.dimension, 4)
    finally:
        pool.close()
    assert Path(PerturbOnce.marker).exists()
    assert stats[2].stale_answers >= 1  # caught in the generation it happened
    # The stale share goes back to the queue and the first free worker takes it: the perturbed one (resynced in
    # generation 2) or the other (then the perturbed one gets the state with its first call of generation 3).
    resynced = [g for g, s in enumerate(stats) if s.resyncs]
    assert [s.resyncs for s in stats if s.resyncs] == [1] and resynced[0] in (2, 3), [s.resyncs for s in stats]
    r = stats[resynced[0]]
    assert r.resync_bytes > 0 and r.bytes_sent > r.resync_bytes
    assert all(np.array_equal(a, b) for a, b in zip(fitness, expected)) and np.array_equal(mean, expected_mean)
    assert all(sum(s.per_worker) == 12 and s.duplicates_dropped == 0 for s in stats)


class CrashOnce(CandidateScorer):
    """A scorer whose process dies (os._exit) the first time anyone scores candidate 3 (alone, or in a run of
    candidates: batched scoring scores a share without calling `score`)."""

    marker = ""

    def crash_at(self, indices: range) -> None:
        if 3 in indices and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(1)

    def score(self, index, offsets, prompt_idx, seed):
        self.crash_at(range(index, index + 1))
        return super().score(index, offsets, prompt_idx, seed)

    def score_range(self, xs, start, prompt_idx, seed):
        self.crash_at(range(start, start + len(xs)))
        return super().score_range(xs, start, prompt_idx, seed)


def test_worker_killed_mid_generation_in_seed_mode_loses_nothing_and_rejoins_from_the_state(tiny, tmp_path, caplog):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    CrashOnce.marker = str(tmp_path / "crashed")
    caplog.set_level(logging.INFO, logger="essaflow.essa.distributed")
    pool = ray_population(spec, workers=2, sync="seed", worker_class=CrashOnce)
    rejoined_at: list[float] = []

    def back_for_one_generation() -> bool:  # go on until the restarted worker is back and has scored again
        if " is back, on node " in caplog.text and not rejoined_at:
            rejoined_at.append(time.monotonic())
            return False
        return bool(rejoined_at)

    try:
        fitness, mean, stats = search(pool, cfg, splits, pool.dimension, 200, until=back_for_one_generation)
    finally:
        pool.close()
    assert Path(CrashOnce.marker).exists() and stats[0].worker_failures == 1 and stats[0].redispatched >= 1
    assert all(sum(s.per_worker) == 12 and s.duplicates_dropped == 0 for s in stats), "each candidate scored once"
    assert sum(s.resyncs for s in stats) == 1, "the restarted worker was given the state once"
    assert min(stats[-1].per_worker) > 0, "the rejoined worker takes candidates again"
    local = LocalPopulation(spec)
    expected, expected_mean, _ = search(local, cfg, splits, local.dimension, len(stats))
    assert all(np.array_equal(a, b) for a, b in zip(fitness, expected)) and np.array_equal(mean, expected_mean)


class Killed(RuntimeError):
    pass


def test_kill_and_resume_in_seed_mode_equals_the_uninterrupted_run(tiny, runs, tmp_path):
    cfg, splits, adapter = tiny
    workers = cfg.essa.workers.model_copy(update={"count": 2})
    run = configured(cfg, sync="seed", checkpoint_every=2, workers=workers)
    straight = runs["seed", 2]

    def kill_at_3(row):
        if row["generation"] == 3:
            raise Killed  # after generation 3 ran, before its checkpoint: the latest one is generation 2

    ckpt = tmp_path / "ckpt"
    with pytest.raises(Killed):
        train_essa(run, splits, adapter, tmp_path / "run", ckpt, on_metrics=kill_at_3)
    assert latest_checkpoint(ckpt).name == "00000002"
    resumed = train_essa(run, splits, adapter, tmp_path / "run", ckpt)
    assert resumed.resumed_from == 2 and resumed.steps == 4
    assert np.array_equal(
        np.load(resumed.output_dir / "essa_offsets.npy"), np.load(straight.output_dir / "essa_offsets.npy")
    )
    assert trace(resumed.metrics) == trace(straight.metrics), "same history, metric by metric"
    assert [m["resyncs"] for m in resumed.metrics[2:]] == [2, 0], "each new worker got the restored state once"
