"""Strategies: CMA-ES converges on a quadratic, ES (antithetic or i.i.d.) follows the gradient, state round trips."""

import json

import numpy as np
import pytest

from essaflow.config import ConfigError, ESSAConfig, load_config
from essaflow.essa.checkpoint import read_checkpoint, write_checkpoint
from essaflow.essa.strategy import CMAStrategy, GaussianES, make_strategy

TARGET = np.linspace(-1.0, 1.0, 10)


def neg_quadratic(x: np.ndarray) -> np.ndarray:
    """A reward to maximise: minus an ill-conditioned quadratic around TARGET."""
    scale = np.logspace(0, 2, x.shape[-1])
    return -(((x - TARGET) * scale) ** 2).sum(axis=-1)


@pytest.mark.parametrize("separable", [False, True])
def test_cma_converges_on_a_quadratic(separable):
    strategy = CMAStrategy(10, 12, sigma0=0.5, seed=0, separable=separable)
    assert np.array_equal(strategy.mean, np.zeros(10)), "mean starts at zero offset (the SFT point)"
    for _ in range(400):
        x = strategy.ask()
        strategy.tell(x, neg_quadratic(x))
    np.testing.assert_allclose(strategy.mean, TARGET, atol=1e-4)
    assert strategy.sigma < 0.01


def test_es_update_follows_the_gradient_of_a_linear_reward():
    g = np.random.default_rng(1).normal(size=20)
    es = GaussianES(20, 400, sigma0=0.1, lr=0.05, seed=0)
    x = es.ask()
    assert np.allclose(x[0::2] + x[1::2], 0.0), "members 2i, 2i+1 are an antithetic pair around the mean"
    es.tell(x, x @ g)
    cos = es.mean @ g / (np.linalg.norm(es.mean) * np.linalg.norm(g))
    assert cos > 0.9
    assert es.sigma == 0.1, "plain ES keeps sigma fixed"


def test_iid_es_update_follows_the_gradient_too():
    g = np.random.default_rng(2).normal(size=20)
    es = GaussianES(20, 400, sigma0=0.1, lr=0.05, seed=0, antithetic=False)
    x = es.ask()
    assert not np.allclose(x[0::2] + x[1::2], 0.0)
    es.tell(x, x @ g)
    assert es.mean @ g / (np.linalg.norm(es.mean) * np.linalg.norm(g)) > 0.9


@pytest.mark.parametrize("kind", ["cma", "sep_cma", "es"])
def test_state_round_trips_bitwise_through_json_and_npz(kind, tmp_path):
    cfg = ESSAConfig(strategy=kind, population=8, sigma0=0.3, seed=5)
    a, b = make_strategy(cfg, 10), make_strategy(cfg, 10)
    for _ in range(7):
        x = a.ask()
        a.tell(x, neg_quadratic(x))
    write_checkpoint(tmp_path, 7, {"strategy": a.state_dict()})
    _, parts = read_checkpoint(tmp_path / "00000007")
    meta, arrays = parts["strategy"]
    b.load_state_dict(json.loads(json.dumps(meta)), arrays)
    for _ in range(5):
        xa, xb = a.ask(), b.ask()
        assert np.array_equal(xa, xb), "same RNG state: same candidates"
        a.tell(xa, neg_quadratic(xa))
        b.tell(xb, neg_quadratic(xb))
    assert np.array_equal(a.mean, b.mean) and a.sigma == b.sigma


def test_checkpoint_holds_no_pickle(tmp_path):
    strategy = make_strategy(ESSAConfig(population=6), 5)
    path = write_checkpoint(tmp_path, 1, {"strategy": strategy.state_dict()})
    with np.load(path / "strategy.npz", allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)


def test_best_point_is_the_best_candidate_told():
    strategy = make_strategy(ESSAConfig(population=6, returned_point="best"), 3)
    x = strategy.ask()
    fitness = np.array([0.1, 0.5, 0.2, 0.5, 0.0, 0.3])
    strategy.tell(x, fitness)
    assert np.array_equal(strategy.result(), x[1]) and strategy.best_fitness == 0.5


def test_tell_refuses_a_wrong_population():
    strategy = make_strategy(ESSAConfig(population=6), 3)
    x = strategy.ask()
    with pytest.raises(ValueError, match="6 candidates"):
        strategy.tell(x[:5], np.zeros(5))


def test_es_needs_an_even_population():
    with pytest.raises(ConfigError, match="essa.*population=7"):
        load_config(None, ["essa.strategy=es", "essa.population=7"])


def test_centered_ranks_give_ties_their_mean_rank_and_bound_the_weights():
    from essaflow.essa.strategy import centered_ranks

    ranks = centered_ranks(np.array([0.5, 0.25, 0.5, 0.75, 0.5]))
    assert ranks.tolist() == [0.0, -0.5, 0.0, 0.5, 0.0]  # the three tied 0.5s share rank 2 of 0..4
    assert centered_ranks(np.full(6, 0.3)).tolist() == [0.0] * 6  # all tied: no update at all
    assert np.isclose(centered_ranks(np.random.RandomState(1).randn(32)).sum(), 0.0)


def test_rank_shaped_es_ignores_tied_candidates():
    """Only the candidates that differ from the tied bulk steer the mean, and the step does not depend on the
    fitness values' scale (a z-score would blow a single outlier up)."""
    steps = []
    for scale in (1.0, 1000.0):
        es = GaussianES(4, 8, 0.1, 0.5, seed=3, antithetic=False, shaping="centered_rank")
        x = es.ask()
        fitness = np.zeros(8)
        fitness[2] = scale  # one candidate better, the other seven tied
        es.tell(x, fitness)
        steps.append(es.mean)
    assert np.allclose(steps[0], steps[1])
    assert np.dot(steps[0], x[2]) > 0  # towards the better candidate


def test_fitness_samples_need_a_sampling_temperature():
    with pytest.raises(ConfigError, match="fitness_samples"):
        load_config(None, ["essa.fitness_samples=4"])
    assert load_config(None, ["essa.fitness_samples=4", "essa.fitness_temperature=1.0"]).essa.fitness_samples == 4
    assert ESSAConfig().fitness_kind == "black-box reward"
    assert ESSAConfig(fitness="answer_logprob").fitness_kind == "gray-box: needs reference answers"
