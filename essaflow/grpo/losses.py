"""Policy losses registered by name (verl's `register_policy_loss` pattern), plus KL and aggregation.

A loss maps per-token log-probs to a per-token loss `[B, T]` (positive = to minimise) and per-token indicator
tensors for diagnostics. Advantages arrive already focal-weighted (see advantages.py), so F-GRPO needs no code
here: the three surrogates are positively homogeneous in the advantage, so scaling A by g >= 0 equals scaling
the prompt's loss by g and leaves every clipping decision unchanged (docs/algorithms.md sec. 3.2).

Aggregation is separate and takes global denominators, so the loss of a batch split over W workers (and over
micro-batches) sums to exactly the loss of the whole batch on one worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from essaflow.registry import Registry

Aggregation = Literal["token_mean", "seq_mean", "token_sum_norm"]


@dataclass(frozen=True)
class ClipRange:
    """Ratio clip bounds [1 - low, 1 + high]."""

    low: float
    high: float


LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, ClipRange], tuple[torch.Tensor, dict[str, torch.Tensor]]]
LOSSES: Registry[LossFn] = Registry("loss")


def register_loss(name: str, clip_low: float, clip_high: float) -> Callable[[LossFn], LossFn]:
    """Decorator: `fn(logp, old_logp, adv, clip) -> (per_token_loss, indicators)` becomes `grpo.loss=name`.

    logp, old_logp: [B, T] log-probs of the sampled tokens (logp carries the gradient); adv: [B] advantages.
    clip_low / clip_high are the bounds its paper uses, applied when the config leaves them unset.
    """
    return LOSSES.register(name, clip_low=clip_low, clip_high=clip_high)


def default_clip(name: str) -> ClipRange:
    """The clip bounds loss `name` was registered with."""
    meta = LOSSES.meta(name)
    return ClipRange(meta["clip_low"], meta["clip_high"])


def resolve_clip(name: str, low: float | None, high: float | None) -> ClipRange:
    """Config clip bounds, each falling back to the loss's published default when None."""
    default = default_clip(name)
    return ClipRange(default.low if low is None else low, default.high if high is None else high)


def _ppo_clip(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: ClipRange
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-min(r A, clip(r, 1 - low, 1 + high) A) per token, r = pi_theta / pi_old (PPO; DSMath Eq. 3)."""
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1.0 - clip.low, 1.0 + clip.high)
    per_token = torch.maximum(unclipped, clipped)
    with torch.no_grad():  # tokens whose gradient the clip removes (TRL's definition)
        stats = {
            "clip_low": (ratio < 1.0 - clip.low) & (a < 0),
            "clip_high": (ratio > 1.0 + clip.high) & (a > 0),
        }
    return per_token, stats


@register_loss("grpo", clip_low=0.2, clip_high=0.2)
def grpo_loss(logp, old_logp, adv, clip):
    """GRPO: PPO clipped surrogate with symmetric eps = 0.2 (DSMath sec. 4.1; FGRPO-v2 App. B Eq. 14, App. L.2).

    DeepSeekMath does not state eps; 0.2 is what F-GRPO ran. The optional k3 KL term is added by `policy_loss`.
    """
    return _ppo_clip(logp, old_logp, adv, clip)


@register_loss("dapo", clip_low=0.2, clip_high=0.28)
def dapo_loss(logp, old_logp, adv, clip):
    """DAPO: the same surrogate with clip-higher, eps_low 0.2 / eps_high 0.28 (DAPO sec. 3.1; FGRPO-v2 Eq. 15).

    DAPO's other parts are options of the trainer, not of this function: token-mean aggregation
    (`aggregation=token_mean`, the default), dynamic sampling (`grpo.dynamic_sampling`) and overlong shaping
    (`grpo.overlong_buffer`, `grpo.overlong_filter`). F-GRPO App. B describes only the asymmetric clip, so both
    default to off (docs/algorithms.md sec. 7.2).
    """
    return _ppo_clip(logp, old_logp, adv, clip)


@register_loss("cispo", clip_low=1.0, clip_high=5.0)
def cispo_loss(logp, old_logp, adv, clip):
    """CISPO: -sg(clip(r, 1 - low, 1 + high)) * A * log pi_theta per token (MiniMax-M1 Eq. 4-5; FGRPO-v2 Eq. 16).

    Every token keeps its gradient; only the importance weight is clipped and detached. F-GRPO used
    eps_low 1.0, eps_high 5.0, i.e. clip(r, 0, 6) (App. L.2). Since r > 0, that equals min(r, 6), the ScaleRL
    spelling, so the two readings of docs/algorithms.md sec. 7.3 agree.
    """
    ratio = torch.exp(logp - old_logp).detach()
    weight = torch.clamp(ratio, 1.0 - clip.low, 1.0 + clip.high)
    per_token = -weight * adv[:, None] * logp
    stats = {"clip_low": ratio < 1.0 - clip.low, "clip_high": ratio > 1.0 + clip.high}
    return per_token, stats


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi_theta || pi_ref) per token: exp(q - p) - (q - p) - 1 >= 0 (DSMath Eq. 4)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token_mean",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    token_mean     sum_{i,t} l / sum_i |o_i|                     (DAPO; what F-GRPO ran, App. L.2)
    seq_mean       (1 / #seq) sum_i (1 / |o_i|) sum_t l          (DeepSeekMath's GRPO, Eq. 3)
    token_sum_norm sum_{i,t} l / (#seq * max_len)                (Dr.GRPO: no length normalisation)

    num_tokens / num_seqs default to this batch's; the trainer passes the global counts of the whole
    (multi-worker) mini-batch so that the per-worker pieces add up to the single-worker loss.
    """
    mask = mask.to(per_token.dtype)
    if mode == "token_mean":
        denom = float(mask.sum()) if num_tokens is None else num_tokens
        return (per_token * mask).sum() / max(denom, 1.0)
    seqs = float(per_token.shape[0]) if num_seqs is None else num_seqs
    if mode == "seq_mean":
        per_seq = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_seq.sum() / max(seqs, 1.0)
    if mode == "token_sum_norm":
        length = per_token.shape[1] if max_len is None else max_len
        return (per_token * mask).sum() / max(seqs * length, 1.0)
    raise ValueError(f"unknown aggregation {mode!r}")


@dataclass
class LossOutput:
    loss: torch.Tensor
    """Scalar to backpropagate."""
    indicators: dict[str, torch.Tensor]
    """Per-token bool tensors (clip_low, clip_high) for clip fractions."""
    kl: torch.Tensor | None
    """Per-token k3 KL to the reference (None without a reference)."""


def policy_loss(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: ClipRange | None = None,
    aggregation: Aggregation = "token_mean",
    ref_logp: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_len: int | None = None,
) -> LossOutput:
    """The loss the trainer backpropagates: registered surrogate + beta * k3 KL (when beta > 0), aggregated.

    The KL term is added per token to the loss, not to the reward (DSMath sec. 4.1); F-GRPO uses beta = 0.
    """
    per_token, indicators = LOSSES.get(name)(logp, old_logp, advantages, clip or default_clip(name))
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        if kl_beta > 0:
            per_token = per_token + kl_beta * kl
    loss = aggregate(per_token, mask, aggregation, num_tokens, num_seqs, max_len)
    return LossOutput(loss=loss, indicators=indicators, kl=kl)
