"""One GRPO-family rollout step as one worker runs it, in-process or as a Ray Train rank (FGRPO-v2 App. L;
docs/algorithms.md sec. 3):

  rollout     sample G completions for this worker's prompt groups and score them (rollout.py);
  advantages  group-normalised, focal-weighted by (1 - success_rate)^gamma (advantages.py);
  loss        per micro-batch, the registered surrogate (+ KL) normalised by the mini-batch's global token and
              sequence counts and scaled by the world size to undo DDP's (FSDP's) averaging, so the gradient
              summed over workers is the single-worker gradient of the same batch (losses.py, batch_split.py);
  step        AdamW after grad-norm clipping, once per global mini-batch; the LR scheduler (linear warm-up, then
              constant) once per rollout step, as verl does.

pi_old: with one mini-batch the update is on-policy, so pi_old = pi_theta.detach() of the same forward (r = 1
exactly; verl does the same); with several it comes from a no-grad pass before the first. Dropout stays off (the
model is in eval mode) so that on-policy ratios are exactly 1. The step's metrics are kept by `metrics.StepMeter`.
How the ranks hold the weights (DDP replicas, FSDP2 shards with float32 masters) is sharding.py's concern.
"""

from __future__ import annotations

import torch

from essaflow.data.schema import Problem
from essaflow.grpo.advantages import group_advantages
from essaflow.grpo.batch_split import frozen_logprobs, global_counts, micro_batches, mini_batch_rows, row_logprobs
from essaflow.grpo.engine import logprob_gap
from essaflow.grpo.learner import Learner
from essaflow.grpo.losses import policy_loss, resolve_clip
from essaflow.grpo.metrics import StepMeter, StepMetrics, StepSums
from essaflow.grpo.rollout import RolloutBatch, collect


def train_step(learner: Learner, train: list[Problem], slots: list[int], step: int) -> StepMetrics:
    """One rollout step: rollout -> advantages -> loss -> optimiser step; returns the step's global metrics."""
    cfg, g = learner.cfg, learner.cfg.grpo
    meter = StepMeter.start(learner.info, learner.comm)
    # rollout: G completions per prompt group, verifier rewards (and shaped ones), on the whole policy
    with learner.dp.gathered():
        batch = collect(
            learner.model, learner.tokenizer, train, slots, step, g, learner.judge or cfg.eval.reward,
            learner.max_new_tokens,
            cfg.data.prompt_format(), learner.engine,
        )  # fmt: skip
    if learner.engine is not None:
        learner.engine.after_rollout()
    # advantages: the estimator by name, then the focal weight (1 - mu_hat)^gamma, once for every loss
    adv = group_advantages(batch.rewards, batch.correct, g.advantage, g.std_mode, g.adv_eps, g.gamma)
    advantages = adv.advantages.reshape(-1)
    ref_logp = None
    if learner.ref_model is not None:
        ref_logp = frozen_logprobs(learner.ref_model, batch, g.temperature, shared_prompt=g.shared_prompt)
    sums = meter.rollout_done(batch, adv)
    old_logp = None  # fully on-policy (one mini-batch): pi_old is the update's own forward, detached
    if g.mini_batches > 1:
        old_logp = frozen_logprobs(learner.model, batch, g.temperature, g.micro_batch_size, learner.shared_prompt)
    grad_norm = 0.0
    for m_idx, rows in enumerate(mini_batch_rows(batch, g.prompts_per_step, g.mini_batches)):
        grad_norm = update_mini_batch(learner, batch, rows, m_idx, advantages, old_logp, ref_logp, sums)
    lr = learner.scheduler.get_last_lr()[0]
    learner.scheduler.step()
    frozen_passes = (old_logp is not None) + (ref_logp is not None)
    metrics = meter.finish(step + 1, sums, batch, grad_norm, lr, frozen_passes, learner.trainable_bytes)
    if learner.engine is not None:
        # the gap is all-reduced: every rank fails together when the engine sampled from stale weights
        learner.engine.check(metrics.engine_logprob_gap or 0.0)
        with learner.dp.gathered():
            learner.engine.sync(learner.model)  # the updated policy, before the next rollout
    return metrics


def update_mini_batch(
    learner: Learner,
    batch: RolloutBatch,
    rows: torch.Tensor,
    m_idx: int,
    advantages: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    sums: StepSums,
) -> float:
    """One optimiser step on global mini-batch `m_idx` (this worker's `rows`): the loss of each micro-batch, its
    gradient accumulated, then AdamW on the clipped gradient. Returns the pre-clip gradient norm."""
    g, info, dp = learner.cfg.grpo, learner.info, learner.dp
    clip = resolve_clip(g.loss, g.clip_eps_low, g.clip_eps_high)
    num_tokens, num_seqs = global_counts(batch, rows, info, learner.comm)
    learner.optimizer.zero_grad(set_to_none=True)
    pieces = micro_batches(rows, g.micro_batch_size)
    for k, r in enumerate(pieces):
        sync = info.world_size == 1 or k == len(pieces) - 1  # all-reduce once, after the last micro-batch
        with dp.accumulate(sync):
            # loss: the surrogate (+ KL) of the micro-batch, normalised by the mini-batch's global counts
            logp, entropy = row_logprobs(dp.module, batch, r, g.temperature, learner.shared_prompt, True)
            mask, device = batch.loss_mask[r].to(logp.device), logp.device
            out = policy_loss(
                g.loss, logp, logp.detach() if old_logp is None else old_logp[r].to(device),
                advantages[r].to(device), mask, clip=clip, aggregation=g.aggregation,
                ref_logp=None if ref_logp is None else ref_logp[r].to(device), kl_beta=g.kl_beta,
                num_tokens=num_tokens, num_seqs=num_seqs, max_len=batch.completion_ids.shape[1],
            )  # fmt: skip
            (out.loss * info.world_size).backward()  # undo the ranks' averaging: the sum is the global gradient
            sums.add_loss(out, entropy, mask, g.mini_batches)
            if batch.engine_logp is not None and m_idx == 0:  # before any update: the sampling policy
                gap, count = logprob_gap(logp, batch.engine_logp[r], mask)
                sums.gap, sums.gap_tokens = sums.gap + gap, sums.gap_tokens + count
    # optimiser step: AdamW on the clipped gradient, once per global mini-batch
    grad_norm = learner.dp.clip_grad_norm(learner.params, g.grad_clip)
    learner.optimizer.step()
    return grad_norm
