"""Policy losses against hand-computed examples; the gamma = 0 identity; zero gradient from uniform groups."""

import math

import pytest
import torch

from essaflow.grpo.advantages import get_advantage, group_advantages
from essaflow.grpo.losses import LOSSES, ClipRange, aggregate, k3_kl, policy_loss, resolve_clip

# Two sequences of two tokens; ratios r = pi / pi_old chosen to hit every clip case.
RATIO = torch.tensor([[1.5, 0.7], [1.1, 0.5]])
ADV = torch.tensor([1.0, -2.0])
MASK = torch.ones(2, 2)


def _logps(ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.tensor([[-0.5, -1.0], [-0.2, -2.0]], requires_grad=True)
    return logp, (logp - torch.log(ratio)).detach()


def test_grpo_loss_hand_computed():
    logp, old = _logps(RATIO)
    out = policy_loss("grpo", logp, old, ADV, MASK, ClipRange(0.2, 0.2))
    # per token -min(rA, clip(r)A): [-1.2, -0.7], [2.2, 1.6]; token mean = 1.9 / 4
    assert out.loss.item() == pytest.approx(0.475, abs=1e-6)
    out.loss.backward()
    # clipped tokens (r=1.5 with A>0; r=0.5 with A<0) get no gradient; others -A r / 4
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.175], [0.55, 0.0]]), atol=1e-6)
    assert out.indicators["clip_high"].tolist() == [[True, False], [False, False]]
    assert out.indicators["clip_low"].tolist() == [[False, False], [False, True]]


def test_dapo_clip_higher_hand_computed():
    assert resolve_clip("dapo", None, None) == ClipRange(0.2, 0.28)
    logp, old = _logps(RATIO)
    out = policy_loss("dapo", logp, old, ADV, MASK)
    assert out.loss.item() == pytest.approx((-1.28 - 0.7 + 2.2 + 1.6) / 4, abs=1e-6)
    # r = 1.25 with A > 0 is clipped by GRPO (1.2) but not by DAPO (1.28)
    r = torch.tensor([[1.25, 1.0], [1.0, 1.0]])
    logp, old = _logps(r)
    policy_loss("dapo", logp, old, ADV, MASK).loss.backward()
    assert float(logp.grad[0, 0]) == pytest.approx(-1.25 / 4, abs=1e-6)
    logp, old = _logps(r)
    policy_loss("grpo", logp, old, ADV, MASK).loss.backward()
    assert float(logp.grad[0, 0]) == 0.0


def test_cispo_hand_computed_keeps_every_token_in_the_gradient():
    assert resolve_clip("cispo", None, None) == ClipRange(1.0, 5.0)  # IS weight clipped to [0, 6]
    ratio = torch.tensor([[1.5, 0.7], [8.0, 0.5]])
    logp, old = _logps(ratio)
    out = policy_loss("cispo", logp, old, ADV, MASK)
    # -sg(clip(r, 0, 6)) A logp: 0.75, 0.7, -2.4, -2.0 -> mean -0.7375
    assert out.loss.item() == pytest.approx(-0.7375, abs=1e-6)
    out.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.375, -0.175], [3.0, 0.25]]), atol=1e-6)
    assert out.indicators["clip_high"].tolist() == [[False, False], [True, False]]


def test_k3_kl_hand_computed_and_added_with_beta():
    logp = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    kl = k3_kl(logp, ref)
    assert torch.allclose(kl, torch.tensor([[math.exp(-0.5) + 0.5 - 1.0, 0.0]]))
    old = logp.clone()
    adv = torch.zeros(1)
    out = policy_loss("grpo", logp, old, adv, torch.ones(1, 2), ref_logp=ref, kl_beta=0.04)
    assert float(out.loss) == pytest.approx(0.04 * float(kl.mean()), abs=1e-9)
    no_beta = policy_loss("grpo", logp, old, adv, torch.ones(1, 2), ref_logp=ref, kl_beta=0.0)
    assert float(no_beta.loss) == 0.0 and no_beta.kl is not None


def test_aggregations_hand_computed():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate(per_token, mask, "token_mean")) == pytest.approx(10 / 4)
    assert float(aggregate(per_token, mask, "seq_mean")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(aggregate(per_token, mask, "token_sum_norm", max_len=5)) == pytest.approx(10 / (2 * 5))


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean", "token_sum_norm"])
def test_pieces_with_global_denominators_add_up_to_the_whole(mode):
    torch.manual_seed(0)
    per_token = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.3).long()
    mask[:, 0] = 1
    whole = aggregate(per_token, mask, mode, max_len=5)
    n_tok, n_seq = float(mask.sum()), 6.0
    parts = sum(aggregate(per_token[i : i + 2], mask[i : i + 2], mode, n_tok, n_seq, 5) for i in (0, 2, 4))
    assert float(parts) == pytest.approx(float(whole), abs=1e-6)


def _batch(seed: int = 0, groups: int = 4, n: int = 8, t: int = 5):
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(groups, n, generator=g) < 0.5).float()
    logits = torch.randn(groups * n, t, generator=g)
    old = torch.log_softmax(torch.randn(groups * n, t, 7, generator=g), -1)[..., 0]
    mask = (torch.rand(groups * n, t, generator=g) > 0.2).float()
    return rewards, logits, old, mask


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_gamma_zero_gives_identical_loss_and_gradients_to_plain_grpo(name, aggregation):
    rewards, logits, old, mask = _batch()
    plain_adv = get_advantage("grpo")(rewards, std_mode="bessel", eps=1e-6).reshape(-1)
    focal_adv = group_advantages(rewards, gamma=0.0).advantages.reshape(-1)
    grads, losses = [], []
    for adv in (plain_adv, focal_adv):
        x = logits.clone().requires_grad_(True)
        logp = torch.nn.functional.logsigmoid(x)
        loss = policy_loss(name, logp, old, adv, mask, aggregation=aggregation).loss
        loss.backward()
        grads.append(x.grad)
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1]) and torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_focal_weight_equals_scaling_each_prompts_loss(name):
    # positive homogeneity (docs/algorithms.md sec. 3.2): surrogate(g A) = g surrogate(A), clipping unchanged
    rewards, logits, old, mask = _batch(1, groups=1)
    out = group_advantages(rewards, gamma=1.0)
    base = group_advantages(rewards, gamma=0.0).advantages.reshape(-1)
    logp = torch.nn.functional.logsigmoid(logits)
    scaled = policy_loss(name, logp, old, out.advantages.reshape(-1), mask).loss
    plain = policy_loss(name, logp, old, base, mask).loss
    assert float(scaled) == pytest.approx(float(out.focal[0]) * float(plain), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_all_correct_and_all_wrong_groups_contribute_zero_gradient(name, gamma):
    rewards, logits, old, mask = _batch(2, groups=3)
    rewards[0] = 1.0  # all correct
    rewards[1] = 0.0  # all wrong
    rewards[2, :3], rewards[2, 3:] = 1.0, 0.0  # mixed
    adv = group_advantages(rewards, gamma=gamma).advantages.reshape(-1)
    x = logits.clone().requires_grad_(True)
    policy_loss(name, torch.nn.functional.logsigmoid(x), old, adv, mask).loss.backward()
    assert torch.equal(x.grad[:16], torch.zeros(16, 5))
    assert x.grad[16:].abs().sum() > 0


def test_unknown_loss_names_the_known_ones():
    with pytest.raises(KeyError, match="cispo"):
        policy_loss("ppo2", torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1))
