"""ESSA on a real local Ray: workers agree with each other and with the in-process path, a worker killed
mid-generation loses and double-counts nothing and rejoins once Ray has restarted it (or the pool says it was still
restarting when the search ended), and workers the cluster cannot hold fail at once. That a short run improves
held-out reward is tests/learning/test_essa_learning.py."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from essaflow.cluster import ClusterCapacityError
from essaflow.essa.distributed import ray_population
from essaflow.essa.loop import train_essa
from essaflow.essa.population import LocalPopulation
from essaflow.essa.ray_pool import ScorerPool
from essaflow.essa.scorer import CandidateScorer, NotLoaded
from essaflow.essa.scoring_spec import scoring_spec
from tests.support import essa_tiny
from tests.support.essa_tiny import make_tiny
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with essa_tiny.local_ray(sys.modules[__name__]):  # the fault-injecting scorers below travel by value
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("essa-ray"), ["essa.workers.ray=true", "essa.population=12"])


class CrashOnce(CandidateScorer):
    """A scorer whose process dies (os._exit, no cleanup) the first time anyone scores candidate `victim`."""

    marker = ""
    victim = 3

    def score(self, index, offsets, prompt_idx, seed):
        if index == self.victim and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(1)
        return super().score(index, offsets, prompt_idx, seed)


def test_two_workers_give_the_same_result_as_one_and_as_in_process(tiny, tmp_path):
    cfg, splits, adapter = tiny
    finals, histories = {}, {}
    for label, overrides in {
        "ray-1": {"workers": cfg.essa.workers.model_copy(update={"count": 1})},
        "ray-2": {"workers": cfg.essa.workers.model_copy(update={"count": 2})},
        "local": {"workers": cfg.essa.workers.model_copy(update={"ray": False})},
    }.items():
        run = cfg.model_copy(deep=True)
        run.essa = run.essa.model_copy(update={"generations": 3, "eval_every": 0, **overrides})
        result = train_essa(run, splits, adapter, tmp_path / label)
        finals[label] = np.load(result.output_dir / "essa_offsets.npy")
        histories[label] = [m["fitness_mean"] for m in result.metrics if "fitness_mean" in m]
        if label == "ray-2":
            assert all(min(m["per_worker"]) > 0 for m in result.metrics), "both workers took candidates"
    assert np.array_equal(finals["ray-1"], finals["ray-2"]) and np.array_equal(finals["ray-1"], finals["local"])
    assert histories["ray-1"] == histories["ray-2"] == histories["local"]


def test_worker_killed_mid_generation_loses_and_double_counts_nothing(tiny, tmp_path, caplog):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    candidates = np.random.default_rng(0).normal(0, 0.3, (12, LocalPopulation(spec).dimension))
    prompt_idx = np.arange(cfg.essa.minibatch)
    expected, _ = LocalPopulation(spec).evaluate(candidates, prompt_idx, seed=7)

    CrashOnce.marker = str(tmp_path / "crashed")
    caplog.set_level(logging.INFO, logger="essaflow.essa.distributed")
    pool = ray_population(spec, workers=2, sync="vectors", worker_class=CrashOnce)
    try:
        fitness, stats = pool.evaluate(candidates, prompt_idx, seed=7)
        assert Path(CrashOnce.marker).exists(), "a worker really died mid-generation"
        assert stats.worker_failures == 1 and stats.redispatched >= 1
        assert np.array_equal(fitness, expected), "every candidate scored once, on its own offsets"
        assert sum(stats.per_worker) == 12 and stats.duplicates_dropped == 0
        # Ray restarts the dead worker (a model load); later generations run meanwhile and it rejoins when ready

        def rejoined() -> bool:
            if " is back, on node " in caplog.text:
                return True
            again, stats2 = pool.evaluate(candidates, prompt_idx, seed=7)
            assert np.array_equal(again, expected) and sum(stats2.per_worker) == 12
            return False

        wait_until(rejoined, 120, "the restarted worker to rejoin", every=0)
        again, stats2 = pool.evaluate(candidates, prompt_idx, seed=7)
        assert min(stats2.per_worker) > 0, "the rejoined worker takes candidates again"
    finally:
        pool.close()


class SlowRestart(CrashOnce):
    """CrashOnce whose restarted process takes a minute to come up (a big model loading after a node loss)."""

    def load(self, spec):
        if os.path.exists(self.marker):
            time.sleep(60)
        super().load(spec)


def test_a_search_that_ends_before_a_restarted_worker_is_back_says_so(tiny, tmp_path, caplog):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    candidates = np.random.default_rng(1).normal(0, 0.3, (12, LocalPopulation(spec).dimension))
    SlowRestart.marker = str(tmp_path / "crashed")
    caplog.set_level(logging.INFO, logger="essaflow.essa.distributed")
    pool = ray_population(spec, workers=2, sync="vectors", worker_class=SlowRestart)
    try:
        _, stats = pool.evaluate(candidates, np.arange(cfg.essa.minibatch), seed=3)
        assert stats.worker_failures == 1 and sum(stats.per_worker) == 12  # the live worker did the rest
    finally:
        t0 = time.monotonic()
        pool.close()
    assert time.monotonic() - t0 < 10, "close does not wait for the restart (a minute)"
    assert re.search(r"ESSA worker\(s\) \[[01]\] still restarting when the pool closed", caplog.text)


def test_a_worker_restarted_unseen_between_generations_answers_not_loaded_and_rejoins(tiny, caplog):
    """Actors are built empty and load with `ready(spec)` (no constructor argument in the object store, which Ray
    warns about for a restartable actor): one Ray restarts while the pool is idle answers its next work with
    NotLoaded, which the pool handles as a dead worker (re-dispatched, pinged with the spec, back)."""
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    candidates = np.random.default_rng(2).normal(0, 0.3, (12, LocalPopulation(spec).dimension))
    prompt_idx = np.arange(cfg.essa.minibatch)
    expected, _ = LocalPopulation(spec).evaluate(candidates, prompt_idx, seed=5)
    caplog.set_level(logging.INFO, logger="essaflow.essa.distributed")
    pool = ray_population(spec, workers=2, sync="vectors")
    try:
        ray.kill(pool.pool.actors[0], no_restart=False)  # Ray restarts it; the pool has no call in flight to notice

        def restarted_empty() -> bool:  # the kill lands a little later; Ray restarts the actor, empty
            try:
                ray.get(pool.pool.actors[0].ready.remote())  # the old process, loaded, until the kill lands
            except NotLoaded:
                return True
            return False

        wait_until(restarted_empty, 120, "Ray to restart the killed worker, empty", every=0.2,
                   retry_on=ray.exceptions.RayActorError)  # fmt: skip
        fitness, stats = pool.evaluate(candidates, prompt_idx, seed=5)
        assert stats.worker_failures == 1 and np.array_equal(fitness, expected) and sum(stats.per_worker) == 12

        def rejoined() -> bool:
            if " is back, on node " in caplog.text:
                return True
            again, _ = pool.evaluate(candidates, prompt_idx, seed=5)
            assert np.array_equal(again, expected)
            return False

        wait_until(rejoined, 120, "the restarted worker to rejoin", every=0)
    finally:
        pool.close()


def test_workers_the_cluster_cannot_hold_fail_before_any_model_loads(tiny):
    cfg, splits, adapter = tiny
    spec = scoring_spec(cfg, splits, adapter)
    t0 = time.monotonic()
    with pytest.raises(ClusterCapacityError, match=r"3 workers x \{CPU: 1, GPU: 1\}.*no node can hold even one"):
        ScorerPool(spec, workers=3, gpus_per_worker=1)
    with pytest.raises(ClusterCapacityError, match="at most 2 fit"):
        ScorerPool(spec, workers=3, cpus_per_worker=1)
    assert time.monotonic() - t0 < 5  # checked against the nodes, nothing started
    assert all(g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())  # none left behind
