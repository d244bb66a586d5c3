"""Strategy replicas without Ray: driven by the tracker's headers they ask what the driver asks, a perturbed or fresh
replica is caught by its digest and brought back by the state, and stale answers trigger one resync, not many."""

import numpy as np
import pytest

from essaflow.essa.config import ESSAConfig
from essaflow.essa.replica import ReplicaTracker, StrategyReplica
from essaflow.essa.strategy import make_strategy

D = 12


def config(strategy: str) -> ESSAConfig:
    return ESSAConfig(strategy=strategy, population=8, sigma0=0.2, seed=5, es_antithetic=strategy == "es")


def fitness_of(x: np.ndarray) -> np.ndarray:
    return -np.sum((x - 0.3) ** 2, axis=1)


def worker_answer(replica: StrategyReplica, tracker: ReplicaTracker, w: int, g: int, index: int):
    """What the worker would answer: apply the header if any, then its candidate's fitness and digest."""
    header, _ = tracker.header(w)
    if header is not None:
        replica.apply(g, header)
    if not replica.ready_for(g):
        return index, None, replica.digest()
    return index, float(fitness_of(replica.candidates[index : index + 1])[0]), replica.digest()


@pytest.mark.parametrize("strategy", ["cma", "sep_cma", "es"])
def test_replicas_follow_the_driver_from_the_seed_alone(strategy):
    cfg = config(strategy)
    driver = make_strategy(cfg, D)
    tracker = ReplicaTracker(2)
    replicas = [StrategyReplica(cfg.model_dump(mode="json"), D) for _ in range(2)]
    for g in range(6):
        x = driver.ask()
        tracker.begin(g, driver, x, np.arange(4), seed=g)
        replies = [worker_answer(replicas[i % 2], tracker, i % 2, g, i) for i in range(cfg.population)]
        assert all(tracker.accept(i % 2, 0, r) for i, r in enumerate(replies)), "every answer in agreement"
        f = np.array([r[1] for r in replies])
        assert np.array_equal(f, fitness_of(x)), "replicas scored exactly the driver's candidates"
        driver.tell(x, f)
        tracker.finish(f)
    assert tracker.epoch == [0, 0], "no resync"


def test_a_perturbed_replica_is_caught_and_resynced_once():
    cfg = config("cma")
    driver, tracker = make_strategy(cfg, D), ReplicaTracker(1)
    replica = StrategyReplica(cfg.model_dump(mode="json"), D)
    for g in range(4):
        x = driver.ask()
        tracker.begin(g, driver, x, np.arange(4), seed=g)
        if g == 2:  # another machine's floats: the replica's mean moves by a rounding error
            replica.strategy._opt._mean += 1e-12
        first = worker_answer(replica, tracker, 0, g, 0)
        second = worker_answer(replica, tracker, 0, g, 1)  # sent before the first answer came back
        if g == 2:
            epoch = tracker.epoch[0]
            assert not tracker.accept(0, epoch, first) and not tracker.accept(0, epoch, second)
            assert tracker.epoch[0] == epoch + 1, "two stale answers, one resync"
            header, state = tracker.header(0)
            assert state is not None and header[3] is state
            replica.apply(g, header)
            first, second = worker_answer(replica, tracker, 0, g, 0), worker_answer(replica, tracker, 0, g, 1)
        assert tracker.accept(0, tracker.epoch[0], first) and tracker.accept(0, tracker.epoch[0], second)
        f = fitness_of(x)
        driver.tell(x, f)
        tracker.finish(f)
    assert tracker.epoch == [1], "after the resync the replica agrees again (generation 3 accepted as is)"


@pytest.mark.parametrize("strategy", ["cma", "es"])
def test_a_fresh_replica_joins_a_resumed_run_from_the_state(strategy):
    cfg = config(strategy)
    driver = make_strategy(cfg, D)
    for _ in range(3):  # generations 0-2 ran before the restart
        x = driver.ask()
        driver.tell(x, fitness_of(x))
    tracker = ReplicaTracker(1)
    tracker.held = [None]  # what a new pool knows of a worker when the run resumes
    replica = StrategyReplica(cfg.model_dump(mode="json"), D)
    for g in range(3, 6):
        x = driver.ask()
        tracker.begin(g, driver, x, np.arange(4), seed=g)
        answer = worker_answer(replica, tracker, 0, g, 3)
        assert tracker.accept(0, 0, answer) and answer[1] == fitness_of(x)[3]
        driver.tell(x, fitness_of(x))
        tracker.finish(fitness_of(x))


def test_a_replica_that_keeps_disagreeing_is_an_error_not_an_endless_resync():
    cfg = config("cma")
    driver, tracker = make_strategy(cfg, D), ReplicaTracker(1)
    x = driver.ask()
    tracker.begin(0, driver, x, np.arange(4), seed=0)
    for _ in range(2):
        tracker.header(0)
        assert not tracker.accept(0, tracker.epoch[0], (0, 0.5, b"wrong!!!"))
    tracker.header(0)
    with pytest.raises(RuntimeError, match="still disagrees"):
        tracker.accept(0, tracker.epoch[0], (0, 0.5, b"wrong!!!"))
    for _ in range(5):  # deaths and restarts are bounded by Ray's max_restarts, not here
        tracker.lost(0)
        assert tracker.header(0)[1] is not None
