"""One rollout step's optimisation on a worker: the loss over global mini-batches, and the step's metrics.

The step's groups are split into `mini_batches` global mini-batches (the same slots whatever the worker count); for
each, every worker backpropagates its share of the loss, DDP all-reduces the gradients, and AdamW takes one step
after grad-norm clipping.

Exactness across worker counts: loss pieces are normalised by *global* token / sequence counts (a 16-byte
all-reduce per mini-batch) and multiplied by the world size to undo DDP's gradient averaging, so the summed
gradient equals the single-worker gradient of the same batch.

Old log-probs: with one mini-batch the update is on-policy, so pi_old = pi_theta.detach() of the same forward
(r = 1 exactly; verl does the same); with several mini-batches they come from a no-grad pass before the first.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, fields

import torch
import torch.distributed as dist

from essaflow.grpo.config import GRPOConfig
from essaflow.grpo.losses import policy_loss, resolve_clip
from essaflow.grpo.rollout import RolloutBatch, token_logprobs


@dataclass
class WorkerInfo:
    """Where a worker sits in the DDP group."""

    rank: int
    world_size: int
    device: torch.device


@dataclass
class CommCounter:
    """Bytes this worker all-reduced in the current step: gradients (DDP hook) and auxiliary sums."""

    grad: int = 0
    aux: int = 0


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
    """Process CPU-seconds of the step (wall seconds on a GPU), summed over ranks (essaflow/training/usage.py)."""
    wall_s: float = 0.0
    """Wall seconds of the step up to the metrics' all-reduce, summed over ranks."""
    ranks: float = 1.0
    """1 per rank: the world size once summed."""

    @classmethod
    def of(cls, batch: RolloutBatch) -> StepSums:
        """The rollout side of the sums; the update adds clip, KL, entropy and loss."""
        active = ~batch.uniform
        return cls(
            seqs=float(batch.rewards.numel()),
            reward=float(batch.rewards.sum()),
            correct=float(batch.correct.sum()),
            groups=float(len(batch.slots)),
            uniform_first=float(batch.uniform_first.sum()),
            uniform=float(batch.uniform.sum()),
            focal=float(batch.focal.sum()),
            focal_active=float(batch.focal[active].sum()),
            active=float(active.sum()),
            tokens=float(batch.loss_mask.sum()),
            gen_tokens=float(batch.gen_tokens),
            retried=float(batch.retried_groups),
            truncated=float(batch.truncated.sum()),
        )

    def all_reduced(self, info: WorkerInfo, comm: CommCounter) -> StepSums:
        vec = torch.tensor([getattr(self, f.name) for f in fields(self)], dtype=torch.float64)
        return StepSums(*all_reduce(vec, info, comm).tolist())


@dataclass
class StepMetrics:
    """One rollout step, global over workers (the record MLflow and the job JSON show; see trainer.py)."""

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
    """Device-seconds of the step over all ranks: CPU time on CPU, wall time on a GPU (essaflow/training/usage.py)."""
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
        )

    def as_row(self) -> dict:
        """A plain dict (JSON, MLflow), without the held-out figure on steps that did not measure it."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def all_reduce(t: torch.Tensor, info: WorkerInfo, comm: CommCounter) -> torch.Tensor:
    """Sum `t` over workers in place (counted as auxiliary bytes); a no-op on one worker."""
    if info.world_size > 1:
        dist.all_reduce(t)
        comm.aux += t.numel() * t.element_size()
    return t


def _chunks(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows] if size <= 0 or size >= len(rows) else list(torch.split(rows, size))


def old_logprobs(module: torch.nn.Module, batch: RolloutBatch, g: GRPOConfig) -> torch.Tensor:
    """pi_old for every row, from a no-grad pass before any update (needed only with several mini-batches)."""
    with torch.no_grad():
        rows = _chunks(torch.arange(len(batch.input_ids)), g.micro_batch_size)
        return torch.cat(
            [
                token_logprobs(module, batch.input_ids[r], batch.attention_mask[r], batch.prompt_width, g.temperature)[
                    0
                ].cpu()
                for r in rows
            ]
        )


def update(
    ddp: torch.nn.Module,
    batch: RolloutBatch,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    g: GRPOConfig,
    info: WorkerInfo,
    sums: StepSums,
    comm: CommCounter,
) -> float:
    """All mini-batch updates of one rollout step; adds loss-side sums to `sums`; returns the last grad norm."""
    per_mb = g.prompts_per_step // g.mini_batches
    grad_norm = 0.0
    if g.mini_batches > 1:
        batch.old_logp = old_logprobs(ddp.module if info.world_size > 1 else ddp, batch, g)
    for m in range(g.mini_batches):
        rows = batch.rows_of([i for i, slot in enumerate(batch.slots) if slot // per_mb == m])
        counts = torch.tensor([float(batch.loss_mask[rows].sum()), float(len(rows))], dtype=torch.float64)
        num_tokens, num_seqs = all_reduce(counts, info, comm).tolist()
        optimizer.zero_grad(set_to_none=True)
        pieces = _chunks(rows, g.micro_batch_size)
        for k, r in enumerate(pieces):
            sync = info.world_size == 1 or k == len(pieces) - 1  # all-reduce once, after the last micro-batch
            with contextlib.nullcontext() if sync else ddp.no_sync():
                _backward(ddp, batch, r, g, info, sums, num_tokens=num_tokens, num_seqs=num_seqs)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, g.grad_clip))
        optimizer.step()
    return grad_norm


def _backward(
    ddp: torch.nn.Module,
    batch: RolloutBatch,
    rows: torch.Tensor,
    g: GRPOConfig,
    info: WorkerInfo,
    sums: StepSums,
    *,
    num_tokens: float,
    num_seqs: float,
) -> None:
    """Loss of one micro-batch (normalised by the global counts), backpropagated; its metrics added to sums."""
    logp, entropy = token_logprobs(
        ddp, batch.input_ids[rows], batch.attention_mask[rows], batch.prompt_width, g.temperature, True
    )
    mask = batch.loss_mask[rows].to(logp.device)
    out = policy_loss(
        g.loss,
        logp,
        logp.detach() if batch.old_logp is None else batch.old_logp[rows].to(logp.device),
        batch.advantages[rows].to(logp.device),
        mask,
        clip=resolve_clip(g.loss, g.clip_eps_low, g.clip_eps_high),
        aggregation=g.aggregation,
        ref_logp=None if batch.ref_logp is None else batch.ref_logp[rows].to(logp.device),
        kl_beta=g.kl_beta,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_len=batch.completion_ids.shape[1],
    )
    (out.loss * info.world_size).backward()  # undo DDP's averaging: the sum over workers is the global gradient
    with torch.no_grad():
        sums.clip_low += float((out.indicators["clip_low"] * mask).sum())
        sums.clip_high += float((out.indicators["clip_high"] * mask).sum())
        sums.entropy += float((entropy * mask).sum())
        sums.kl += 0.0 if out.kl is None else float((out.kl * mask).sum())
        sums.loss += out.loss.item() / g.mini_batches
