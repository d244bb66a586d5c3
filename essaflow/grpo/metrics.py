"""The metrics of one rollout step: per-worker sums, all-reduced once into the step's global record.

`StepMeter` holds the step's clocks and byte counters, so the step itself only hands it the batch, the advantages,
each micro-batch's loss and the optimiser's figures. Field meanings: `loop.py`'s docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.distributed as dist

from essaflow.grpo.advantages import GroupAdvantages
from essaflow.grpo.losses import LossOutput
from essaflow.grpo.rollout import RolloutBatch
from essaflow.grpo.worker_group import CommCounter, WorkerInfo, all_reduce


@dataclass
class StepSums:
    """Per-worker sums of one step, all-reduced once into the step's global metrics (float64, field order)."""

    seqs: float = 0.0
    reward: float = 0.0
    correct: float = 0.0
    groups: float = 0.0
    uniform_first: float = 0.0
    uniform: float = 0.0
    focal: float = 0.0
    focal_active: float = 0.0
    active: float = 0.0
    tokens: float = 0.0
    clip_low: float = 0.0
    clip_high: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    loss: float = 0.0
    gen_tokens: float = 0.0
    retried: float = 0.0
    truncated: float = 0.0
    forward_tokens: float = 0.0
    """Tokens through gradient-free forwards: the rollout's prompts and completions, old/reference log-probs."""
    backward_tokens: float = 0.0
    """Tokens through forward + backward: every sequence once over the step's mini-batches."""
    device_s: float = 0.0
    """Process CPU-seconds of the step (wall seconds on a GPU), summed over ranks (essaflow/usage.py)."""
    wall_s: float = 0.0
    """Wall seconds of the step up to the metrics' all-reduce, summed over ranks."""
    ranks: float = 1.0
    """1 per rank: the world size once summed."""
    gap: float = 0.0
    """Sum over sampled tokens of |trainer - engine| log-probability (vLLM rollouts; grpo/engine.py)."""
    gap_tokens: float = 0.0
    """Tokens that sum covers (0: the transformers engine sampled, no gap to report)."""
    reward_parts: dict[str, float] = field(default_factory=dict)
    """Sum of each named reward component over the batch's completions (summed apart from the fields above: its
    names come from the reward)."""

    @classmethod
    def of(cls, batch: RolloutBatch, adv: GroupAdvantages) -> StepSums:
        """The rollout and advantage side of the sums; `add_loss` adds clip, KL, entropy and loss."""
        active = ~adv.uniform
        return cls(
            seqs=float(batch.rewards.numel()),
            reward=float(batch.rewards.sum()),
            correct=float(batch.correct.sum()),
            groups=float(len(batch.slots)),
            uniform_first=float(batch.uniform_first.sum()),
            uniform=float(adv.uniform.sum()),
            focal=float(adv.focal.sum()),
            focal_active=float(adv.focal[active].sum()),
            active=float(active.sum()),
            tokens=float(batch.loss_mask.sum()),
            gen_tokens=float(batch.gen_tokens),
            retried=float(batch.retried_groups),
            truncated=float(batch.truncated.sum()),
            reward_parts={name: float(col.sum()) for name, col in batch.reward_parts.items()},
        )

    @torch.no_grad()
    def add_loss(self, out: LossOutput, entropy: torch.Tensor, mask: torch.Tensor, mini_batches: int) -> None:
        """One micro-batch's loss-side sums: clipped tokens, entropy, KL, and its share of the step's loss."""
        self.clip_low += float((out.indicators["clip_low"] * mask).sum())
        self.clip_high += float((out.indicators["clip_high"] * mask).sum())
        self.entropy += float((entropy * mask).sum())
        self.kl += 0.0 if out.kl is None else float((out.kl * mask).sum())
        self.loss += out.loss.item() / mini_batches

    def all_reduced(self, info: WorkerInfo, comm: CommCounter) -> StepSums:
        numbers = [f.name for f in fields(self) if f.name != "reward_parts"]
        names = component_names(self.reward_parts, info)
        vec = torch.tensor(
            [getattr(self, n) for n in numbers] + [self.reward_parts.get(n, 0.0) for n in names], dtype=torch.float64
        )
        total = all_reduce(vec, info, comm).tolist()
        return StepSums(**dict(zip(numbers, total)), reward_parts=dict(zip(names, total[len(numbers) :])))


def component_names(parts: dict[str, float], info: WorkerInfo) -> list[str]:
    """The reward components any rank saw, in one order on every rank (a rank whose completions never returned a
    component sums 0 for it)."""
    if info.world_size == 1:
        return sorted(parts)
    gathered: list[list[str] | None] = [None] * info.world_size
    dist.all_gather_object(gathered, sorted(parts))
    return sorted({n for names in gathered for n in names or []})


@dataclass
class StepMetrics:
    """One rollout step, global over workers (the record MLflow and the job JSON show; see loop.py)."""

    step: int
    reward_mean: float
    correct_mean: float
    zero_variance_share: float
    zero_variance_share_final: float
    focal_mean: float
    focal_mean_active: float
    clip_frac_low: float
    clip_frac_high: float
    kl: float
    entropy: float
    loss: float
    completion_len: float
    truncated_share: float
    retried_groups: int
    gen_tokens: int
    forward_tokens: int = 0
    backward_tokens: int = 0
    device_s: float = 0.0
    """Device-seconds of the step over all ranks: CPU time on CPU, wall time on a GPU (essaflow/usage.py)."""
    wall_s_mean: float = 0.0
    """The step's wall seconds, mean over ranks: the clock grpo.time_budget_s counts, the same on every rank."""
    grad_norm: float = 0.0
    lr: float = 0.0
    step_s: float = 0.0
    gen_s: float = 0.0
    train_s: float = 0.0
    tokens_per_s: float = 0.0
    bytes_allreduced: int = 0
    aux_bytes: int = 0
    trainable_bytes: int = 0
    eval_greedy: float | None = None
    engine_logprob_gap: float | None = None
    """Mean |trainer - engine| log-probability per sampled token, before the step's update (sampling.backend=vllm;
    absent on transformers): ~1e-6 when the engine serves the trainer's weights (grpo/engine.py)."""
    reward_components: dict[str, float] = field(default_factory=dict)
    """Mean of each named reward component over the step's completions (rows `reward.<name>`; empty when the
    reward returns a number)."""

    @classmethod
    def from_sums(cls, step: int, s: StepSums) -> StepMetrics:
        seqs, tokens, groups = max(s.seqs, 1.0), max(s.tokens, 1.0), max(s.groups, 1.0)
        return cls(
            step=step,
            reward_mean=s.reward / seqs,
            correct_mean=s.correct / seqs,
            zero_variance_share=s.uniform_first / groups,
            zero_variance_share_final=s.uniform / groups,
            focal_mean=s.focal / groups,
            focal_mean_active=s.focal_active / max(s.active, 1.0),
            clip_frac_low=s.clip_low / tokens,
            clip_frac_high=s.clip_high / tokens,
            kl=s.kl / tokens,
            entropy=s.entropy / tokens,
            loss=s.loss,
            completion_len=s.gen_tokens / seqs,
            truncated_share=s.truncated / seqs,
            retried_groups=int(s.retried),
            gen_tokens=int(s.gen_tokens),
            forward_tokens=int(s.forward_tokens),
            backward_tokens=int(s.backward_tokens),
            device_s=round(s.device_s, 4),
            wall_s_mean=round(s.wall_s / max(s.ranks, 1.0), 4),
            engine_logprob_gap=s.gap / s.gap_tokens if s.gap_tokens else None,
            reward_components={name: total / seqs for name, total in s.reward_parts.items()},
        )

    def as_row(self) -> dict:
        """A flat dict (JSON, MLflow): reward components as `reward.<name>`, without the held-out figure on steps
        that did not measure it."""
        row = {k: v for k, v in asdict(self).items() if v is not None and k != "reward_components"}
        return row | {f"reward.{name}": v for name, v in self.reward_components.items()}


@dataclass
class StepMeter:
    """The clocks and byte counters of one rollout step; `finish` turns the step's sums into its StepMetrics."""

    info: WorkerInfo
    comm: CommCounter
    clock: Callable[[], float]
    """Process CPU time on CPU, wall time on a GPU (essaflow/usage.py)."""
    t0: float
    c0: float
    t1: float = 0.0
    """When the rollout (and its reference log-probs) ended and the training part began."""

    @classmethod
    def start(cls, info: WorkerInfo, comm: CommCounter) -> StepMeter:
        t0 = time.perf_counter()
        clock = time.perf_counter if info.device.type == "cuda" else time.process_time
        meter = cls(info, comm, clock, t0, clock())
        comm.grad = comm.aux = 0
        return meter

    def rollout_done(self, batch: RolloutBatch, adv: GroupAdvantages) -> StepSums:
        """The sums of the rollout side; the training clock starts."""
        sums = StepSums.of(batch, adv)
        self.t1 = time.perf_counter()
        return sums

    def finish(
        self, step: int, sums: StepSums, batch: RolloutBatch, grad_norm: float, lr: float, frozen_passes: int,
        trainable_bytes: int,
    ) -> StepMetrics:  # fmt: skip
        """The step's global metrics. frozen_passes: gradient-free forwards beyond the rollout (pi_old, pi_ref)."""
        sequence_tokens = float(batch.attention_mask.sum())  # prompt + completion, padding left out
        sums.forward_tokens, sums.backward_tokens = sequence_tokens * (1 + frozen_passes), sequence_tokens
        sums.device_s, sums.wall_s = self.clock() - self.c0, time.perf_counter() - self.t0
        m = StepMetrics.from_sums(step, sums.all_reduced(self.info, self.comm))
        m.grad_norm, m.lr, m.gen_s = grad_norm, lr, batch.gen_s
        m.step_s, m.train_s = time.perf_counter() - self.t0, time.perf_counter() - self.t1
        m.tokens_per_s = m.gen_tokens / m.step_s
        m.bytes_allreduced, m.aux_bytes, m.trainable_bytes = self.comm.grad, self.comm.aux, trainable_bytes
        return m
