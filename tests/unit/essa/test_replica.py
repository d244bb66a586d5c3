"""Search replicas without Ray: driven by the tracker's briefs they draw what the driver draws (minibatch, seed,
candidates), a perturbed or fresh replica is caught by its digest and brought back by the state, stale answers
trigger one resync, not many, and a generation costs a few hundred bytes."""

import numpy as np
import pytest

from essaflow.essa.config import ESSAConfig
from essaflow.essa.metrics import payload_bytes
from essaflow.essa.prompt_sampler import MinibatchSampler, generation_seed
from essaflow.essa.replica import ReplicaTracker, StrategyReplica, decode_fitness, encode_fitness
from essaflow.essa.strategy import make_strategy
from tests.support.strategies import move_mean

D, TRAIN = 12, 40


def config(strategy: str, population: int = 8) -> ESSAConfig:
    return ESSAConfig(
        strategy=strategy, population=population, sigma0=0.2, seed=5, minibatch=16, es_antithetic=strategy == "es"
    )


def fitness_of(x: np.ndarray, prompt_idx: np.ndarray) -> np.ndarray:
    """A fitness that depends on the candidates and the minibatch, exact in float32 like accuracy k/b."""
    return np.round(-np.sum((x - 0.3) ** 2, axis=1) * 64 + prompt_idx.sum() % 7) / 64


class Driver:
    """The trainer's side: strategy + sampler drawing each generation, and the tracker."""

    def __init__(self, cfg: ESSAConfig, workers: int):
        self.cfg = cfg
        self.strategy = make_strategy(cfg, D)
        self.sampler = MinibatchSampler(TRAIN, cfg.minibatch, cfg.seed)
        self.tracker = ReplicaTracker(workers)

    def draw(self, g: int):
        idx = self.sampler.next()
        x = self.strategy.ask()
        self.tracker.begin(g, self.strategy, self.sampler, x, idx, generation_seed(self.cfg.seed, g))
        return x, idx

    def tell(self, x, f):
        self.strategy.tell(x, f)
        self.tracker.finish(f)


USAGE = b"\0" * 12  # essaflow.usage.Usage.encode() of a share's cost


def worker_answer(replica: StrategyReplica, tracker: ReplicaTracker, w: int, g: int, share: range):
    """What `CandidateScorer.score_share` answers: apply the brief, then the share's fitness, digest and cost."""
    others, state = tracker.brief(w)
    replica.advance(g, others, state)
    if not replica.holds(g):
        return share.start, None, replica.digest(), b""
    values = fitness_of(replica.candidates, replica.prompt_idx)[share.start : share.stop]
    replica.scored(share, list(values))
    return share.start, encode_fitness(values), replica.digest(), USAGE


def new_replica(cfg: ESSAConfig) -> StrategyReplica:
    return StrategyReplica(cfg.model_dump(mode="json"), D, TRAIN)


@pytest.mark.parametrize("strategy", ["cma", "sep_cma", "es"])
def test_replicas_follow_the_driver_from_the_seed_alone(strategy):
    cfg = config(strategy)
    driver = Driver(cfg, 2)
    replicas = [new_replica(cfg) for _ in range(2)]
    shares = [range(0, 4), range(4, 8)]
    for g in range(6):
        x, idx = driver.draw(g)
        replies = [worker_answer(replicas[w], driver.tracker, w, g, shares[w]) for w in range(2)]
        assert all(driver.tracker.accept(w, 0, shares[w], r) for w, r in enumerate(replies)), "all in agreement"
        f = np.concatenate([decode_fitness(r[1]) for r in replies])
        assert np.array_equal(f, fitness_of(x, idx)), "replicas scored the driver's candidates on its minibatch"
        assert all(np.array_equal(r.prompt_idx, idx) for r in replicas)
        driver.tell(x, f)
    assert driver.tracker.epoch == [0, 0], "no resync"


def test_a_generation_costs_a_few_hundred_bytes():
    """Two workers, population 32: one call and one answer each; each call carries the 16 fitnesses of the
    previous generation the worker did not score (64 bytes of float32), each answer its 16 and 12 bytes of cost."""
    cfg = config("es", population=32)
    driver = Driver(cfg, 2)
    replicas = [new_replica(cfg) for _ in range(2)]
    shares = [range(0, 16), range(16, 32)]
    for g in range(3):
        x, idx = driver.draw(g)
        sent = received = 0
        replies = []
        for w in range(2):
            others, state = driver.tracker.brief(w)
            assert state is None and (g == 0 or len(others) == 64)
            sent += payload_bytes((g, shares[w].start, shares[w].stop, others, state))
            replies.append(worker_answer_briefed(replicas[w], g, shares[w], others))
            received += payload_bytes(replies[-1])
        assert all(driver.tracker.accept(w, 0, shares[w], r) for w, r in enumerate(replies))
        driver.tell(x, np.concatenate([decode_fitness(r[1]) for r in replies]))
        if g > 0:
            assert sent + received < 557_056 / 1000 * 0.8, (sent, received)  # with a fifth to spare
    assert all(r.generation == 2 for r in replicas)


def worker_answer_briefed(replica: StrategyReplica, g: int, share: range, others: bytes | None):
    replica.advance(g, others, None)
    values = fitness_of(replica.candidates, replica.prompt_idx)[share.start : share.stop]
    replica.scored(share, list(values))
    return share.start, encode_fitness(values), replica.digest(), USAGE


def test_a_brief_that_does_not_fit_what_the_worker_scored_leaves_it_behind():
    """A worker whose own record and the driver's disagree does not tell a wrong vector: it stays at the old
    generation, answers without a fitness, and the driver sends the state."""
    cfg = config("es")
    driver = Driver(cfg, 1)
    replica = new_replica(cfg)
    x, idx = driver.draw(0)
    answer = worker_answer(replica, driver.tracker, 0, 0, range(0, 8))
    assert driver.tracker.accept(0, 0, range(0, 8), answer)
    driver.tell(x, fitness_of(x, idx))
    replica.own.pop(3)  # the worker forgot one of its own scores
    driver.draw(1)
    answer = worker_answer(replica, driver.tracker, 0, 1, range(0, 8))
    assert answer[1] is None and replica.generation == 0
    assert not driver.tracker.accept(0, 0, range(0, 8), answer)
    assert driver.tracker.brief(0)[1] is not None, "the state goes out next"


def test_fitness_travels_as_float32_exactly():
    f = np.array([0.25, 17 / 128, -3.5, 1.0])
    assert np.array_equal(decode_fitness(encode_fitness(f)), f)
    assert len(encode_fitness(np.zeros(32))) == 128


def test_a_perturbed_replica_is_caught_and_resynced_once():
    cfg = config("cma")
    driver = Driver(cfg, 1)
    replica = new_replica(cfg)
    whole = range(0, cfg.population)
    for g in range(4):
        x, idx = driver.draw(g)
        if g == 2:  # another machine's floats: the replica's mean moves by a rounding error
            move_mean(replica.strategy, 1e-12)
        first = worker_answer(replica, driver.tracker, 0, g, whole)
        if g == 2:
            epoch = driver.tracker.epoch[0]
            assert not driver.tracker.accept(0, epoch, whole, first)
            assert driver.tracker.epoch[0] == epoch + 1, "one stale answer, one resync"
            fitness, state = driver.tracker.brief(0)
            assert fitness is None and state is not None and state.generation == 2
            replica.advance(g, fitness, state)
            driver.tracker.briefed[0] = None  # let worker_answer brief again (nothing left to send)
            first = worker_answer(replica, driver.tracker, 0, g, whole)
        assert driver.tracker.accept(0, driver.tracker.epoch[0], whole, first)
        driver.tell(x, fitness_of(x, idx))
    assert driver.tracker.epoch == [1], "after the resync the replica agrees again (generation 3 accepted as is)"


def test_a_replica_with_another_minibatch_is_caught():
    cfg = config("es")
    driver = Driver(cfg, 1)
    replica = new_replica(cfg)
    x, idx = driver.draw(0)
    replica.prompt_idx = replica.prompt_idx[::-1].copy()  # same prompts, other order: another sampler state
    assert not driver.tracker.accept(0, 0, range(0, 8), worker_answer(replica, driver.tracker, 0, 0, range(0, 8)))


@pytest.mark.parametrize("strategy", ["cma", "es"])
def test_a_fresh_replica_joins_a_resumed_run_from_the_state(strategy):
    cfg = config(strategy)
    driver = Driver(cfg, 1)
    for g in range(3):  # generations 0-2 ran before the restart
        x, idx = driver.draw(g)
        driver.tell(x, fitness_of(x, idx))
    driver.tracker = ReplicaTracker(1)
    driver.tracker.held = [None]  # what a new pool knows of a worker when the run resumes
    replica = new_replica(cfg)
    for g in range(3, 6):
        x, idx = driver.draw(g)
        answer = worker_answer(replica, driver.tracker, 0, g, range(2, 5))
        assert driver.tracker.accept(0, 0, range(2, 5), answer)
        assert np.array_equal(decode_fitness(answer[1]), fitness_of(x, idx)[2:5])
        driver.tell(x, fitness_of(x, idx))


def test_a_replica_that_keeps_disagreeing_is_an_error_not_an_endless_resync():
    cfg = config("cma")
    driver = Driver(cfg, 1)
    driver.draw(0)
    tracker = driver.tracker
    for _ in range(2):
        tracker.brief(0)
        assert not tracker.accept(0, tracker.epoch[0], range(0, 1), (0, b"\0" * 4, b"wrong!!!", USAGE))
    tracker.brief(0)
    with pytest.raises(RuntimeError, match="still disagrees"):
        tracker.accept(0, tracker.epoch[0], range(0, 1), (0, b"\0" * 4, b"wrong!!!", USAGE))
    for _ in range(5):  # deaths and restarts are bounded by Ray's max_restarts, not here
        tracker.lost(0)
        assert tracker.brief(0)[1] is not None
