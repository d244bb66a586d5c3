"""Group-relative advantages and F-GRPO's focal weight, registered by name (verl's `register_adv_est` pattern).

Shapes: every function takes rewards as a `[num_groups, group_size]` tensor (one row per prompt, its N rollouts)
and returns advantages of the same shape. A group always lives on one worker, so nothing here communicates.

The focal weight is applied once, in `group_advantages`, after whichever estimator is selected, so F-GRPO
composes with every estimator and every loss instead of being copied into each (FGRPO-v2 sec. 4.2, Eq. 13:
"a single per-prompt scalar multiplied into the group-relative advantage"; docs/algorithms.md sec. 3.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from essaflow.registry import Registry

StdMode = Literal["population", "bessel", "none"]
AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage")
register_advantage = ADVANTAGES.register
"""Decorator: make `fn(rewards, std_mode=..., eps=...) -> advantages` selectable as `grpo.advantage=name`."""
get_advantage = ADVANTAGES.get
"""The estimator registered as `name`; the error lists the known ones."""


def _uniform(rewards: torch.Tensor) -> torch.Tensor:
    """[num_groups] bool: every rollout of the group got the same reward (the group carries no signal)."""
    return rewards.amax(dim=1) == rewards.amin(dim=1)


@register_advantage("grpo")
def grpo_advantage(rewards: torch.Tensor, std_mode: StdMode = "bessel", eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i - mean R) / (std R + eps) within each group (DeepSeekMath sec. 4.1.2; FGRPO-v2 Eq. 3).

    The paper writes std(.) + eps without saying which std (docs/algorithms.md sec. 7.1), so it is a choice:
    `population` divides by N, `bessel` by N - 1 (verl's default), `none` skips the division (= Dr.GRPO).
    Uniform groups get exactly 0 (not 0 / eps, which is 0 only when the mean is exact).
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if std_mode == "none":
        adv = centred
    else:
        std = rewards.std(dim=1, keepdim=True, correction=1 if std_mode == "bessel" else 0)
        adv = centred / (std + eps)
    return adv.masked_fill(_uniform(rewards)[:, None], 0.0)


@register_advantage("drgrpo")
def drgrpo_advantage(rewards: torch.Tensor, std_mode: StdMode = "none", eps: float = 1e-6) -> torch.Tensor:
    """Dr.GRPO: A_i = R_i - mean R, no std division (Liu et al. 2025, "Understanding R1-Zero-like training", sec. 3.1).

    std_mode and eps are ignored: removing the std is the point of the estimator. Pair it with
    `aggregation=token_sum_norm` for Dr.GRPO's length-unbiased aggregation.
    """
    del std_mode, eps
    return grpo_advantage(rewards, std_mode="none")


def success_rate(correct: torch.Tensor, reward_correct: float = 1.0, reward_wrong: float = 0.0) -> torch.Tensor:
    """mu_hat = (mean R - R_w) / (R_c - R_w) per group, from the same N rollouts (FGRPO-v2 Eq. 11).

    `correct` holds the verifier's rewards before any shaping (e.g. DAPO's overlong penalty), so mu_hat stays the
    share of correct rollouts even when the advantage uses a shaped reward (docs/algorithms.md sec. 7.7: our decision).
    Clamped to [0, 1]; computed without gradient (it is a function of rewards only).
    """
    with torch.no_grad():
        mu = (correct.float().mean(dim=1) - reward_wrong) / (reward_correct - reward_wrong)
        return mu.clamp(0.0, 1.0)


def focal_weight(success: torch.Tensor | float, gamma: float) -> torch.Tensor:
    """g = (1 - mu_hat)^gamma (FGRPO-v2 Eq. 12). gamma = 0 gives exactly 1.0 (0^0 = 1), i.e. the base method.

    Example (docs/algorithms.md sec. 3.2): N = 8, gamma = 0.5, mu_hat = 7/8 -> g = 0.354; mu_hat = 1/8 -> g = 0.935.
    """
    mu = torch.as_tensor(success, dtype=torch.float32)
    with torch.no_grad():
        return torch.pow(1.0 - mu, gamma)


@dataclass
class GroupAdvantages:
    """What `group_advantages` computed, per group and per rollout."""

    advantages: torch.Tensor
    """[num_groups, group_size] focal-weighted advantages A_hat = g * A (FGRPO-v2 Eq. 13)."""
    success: torch.Tensor
    """[num_groups] mu_hat."""
    focal: torch.Tensor
    """[num_groups] g."""
    uniform: torch.Tensor
    """[num_groups] bool: zero-variance groups (all correct or all wrong)."""


def group_advantages(
    rewards: torch.Tensor,
    correct: torch.Tensor | None = None,
    estimator: str = "grpo",
    std_mode: StdMode = "bessel",
    eps: float = 1e-6,
    gamma: float = 0.0,
) -> GroupAdvantages:
    """Estimator by name, then the focal weight, applied once for every loss (FGRPO-v2 sec. 4.2, Eq. 13).

    rewards: [num_groups, N] rewards the advantage is computed from (possibly shaped).
    correct: [num_groups, N] binary verifier rewards mu_hat is computed from (defaults to rewards).
    g multiplies every rollout (hence every token) of the group uniformly and carries no gradient.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {tuple(rewards.shape)}")
    rewards = rewards.float()
    adv = get_advantage(estimator)(rewards, std_mode=std_mode, eps=eps)
    mu = success_rate(rewards if correct is None else correct)
    g = focal_weight(mu, gamma)
    return GroupAdvantages(advantages=adv * g[:, None], success=mu, focal=g, uniform=_uniform(rewards))
