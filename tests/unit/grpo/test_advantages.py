"""Group advantages and F-GRPO's focal weight: known values, the gamma = 0 identity, uniform groups, registry."""

import math

import pytest
import torch

from essaflow.config import ConfigError, load_config
from essaflow.grpo.advantages import (
    ADVANTAGES,
    focal_weight,
    get_advantage,
    group_advantages,
    register_advantage,
    success_rate,
)


def _group(correct: int, n: int = 8) -> torch.Tensor:
    return torch.tensor([[1.0] * correct + [0.0] * (n - correct)])


def test_focal_weight_known_values():
    # docs/algorithms.md sec. 3.2: N = 8, gamma = 0.5: mu = 7/8 -> 0.354, mu = 1/8 -> 0.935
    assert float(focal_weight(success_rate(_group(7)), 0.5)) == pytest.approx(0.3536, abs=1e-4)
    assert float(focal_weight(success_rate(_group(1)), 0.5)) == pytest.approx(0.9354, abs=1e-4)
    assert float(focal_weight(7 / 8, 1.0)) == pytest.approx(0.125)
    assert float(focal_weight(1.0, 0.5)) == 0.0


def test_gamma_zero_weight_is_exactly_one_even_for_all_correct():
    mu = torch.tensor([0.0, 0.125, 0.5, 1.0])
    assert torch.equal(focal_weight(mu, 0.0), torch.ones(4))


def test_success_rate_is_the_share_of_correct_rollouts_of_the_same_group():
    rewards = torch.cat([_group(k) for k in range(9)])
    assert torch.allclose(success_rate(rewards), torch.arange(9) / 8)


@pytest.mark.parametrize("std_mode", ["population", "bessel"])
def test_binary_advantages_match_the_closed_form(std_mode):
    # docs/algorithms.md sec. 3.1: population std gives |A+| = sqrt((1-mu)/mu), |A-| = sqrt(mu/(1-mu)); Bessel x
    # sqrt((N-1)/N)
    n, k = 8, 3
    mu = k / n
    adv = group_advantages(_group(k, n), std_mode=std_mode, eps=0.0).advantages[0]
    scale = 1.0 if std_mode == "population" else math.sqrt((n - 1) / n)
    assert float(adv[0]) == pytest.approx(math.sqrt((1 - mu) / mu) * scale, rel=1e-6)
    assert float(adv[-1]) == pytest.approx(-math.sqrt(mu / (1 - mu)) * scale, rel=1e-6)


def test_focal_scales_both_signs_by_one_minus_mu_to_gamma():
    base = group_advantages(_group(6), gamma=0.0).advantages
    focal = group_advantages(_group(6), gamma=1.0).advantages
    assert torch.allclose(focal, base * 0.25)


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES))
@pytest.mark.parametrize("std_mode", ["population", "bessel", "none"])
def test_gamma_zero_is_bit_identical_to_the_plain_estimator(estimator, std_mode):
    torch.manual_seed(0)
    rewards = (torch.rand(16, 8) < 0.4).float()
    plain = get_advantage(estimator)(rewards, std_mode=std_mode, eps=1e-6)
    out = group_advantages(rewards, estimator=estimator, std_mode=std_mode, gamma=0.0)
    assert torch.equal(out.advantages, plain)


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES))
@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_all_correct_and_all_wrong_groups_get_zero_advantage(estimator, gamma):
    rewards = torch.cat([_group(8), _group(0), _group(4), torch.full((1, 8), 0.7)])
    out = group_advantages(rewards, estimator=estimator, gamma=gamma)
    assert torch.equal(out.advantages[[0, 1, 3]], torch.zeros(3, 8))
    assert out.uniform.tolist() == [True, True, False, True]
    assert out.advantages[2].abs().sum() > 0


def test_drgrpo_has_no_std_division():
    adv = group_advantages(_group(2, 4), estimator="drgrpo").advantages
    assert torch.allclose(adv, torch.tensor([[0.5, 0.5, -0.5, -0.5]]))


def test_success_rate_uses_unshaped_correctness_when_rewards_are_shaped():
    correct = _group(4)
    shaped = correct - torch.tensor([[0, 0, 0, 0.5, 0, 0, 0, 1.0]])  # e.g. DAPO overlong penalty
    out = group_advantages(shaped, correct, gamma=1.0)
    assert float(out.success[0]) == 0.5 and float(out.focal[0]) == 0.5


def test_rejects_flat_rewards():
    with pytest.raises(ValueError, match="num_groups, group_size"):
        group_advantages(torch.ones(8))


def test_registered_estimator_is_selectable_by_name_in_the_config():
    @register_advantage("test_rank")
    def rank_advantage(rewards, std_mode="none", eps=0.0):
        return rewards.argsort(dim=1).argsort(dim=1).float() - (rewards.shape[1] - 1) / 2

    try:
        assert load_config(None, ["grpo.advantage=test_rank"]).grpo.advantage == "test_rank"
        out = group_advantages(torch.tensor([[0.0, 1.0, 0.5]]), estimator="test_rank", gamma=0.0)
        assert out.advantages.tolist() == [[-1.0, 1.0, 0.0]]
    finally:
        ADVANTAGES.pop("test_rank")
    with pytest.raises(ConfigError, match="grpo.advantage"):
        load_config(None, ["grpo.advantage=test_rank"])
