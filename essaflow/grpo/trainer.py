"""Train the GRPO family (GRPO, DAPO, CISPO + F-GRPO's focal weight) from the SFT start: `train_grpo`.

One loop (`loop.py`) runs on every worker: in this process for one worker, or on Ray Train ranks (`distributed.py`),
as DDP replicas or FSDP2 shards (`sharding.py`). The driver turns the workers' typed events into the caller's
callbacks and a TrainResult.

Bytes all-reduced per rollout step, measured by a DDP communication hook (0 in a one-process ddp run; under
grpo.sharding=fsdp the float32 gradients reduce-scattered, every gradient once per mini-batch):
    bytes_per_step = mini_batches * sum over trainable parameters p of numel(p) * element_size(p)
(the payload each worker contributes; a ring all-reduce moves 2 (W - 1) / W times that per worker).
Metrics and normalisers add `aux_bytes` per step (float64 sums), reported separately.

Metrics per step (`metrics.StepMetrics`, global over workers): reward_mean (shaped) and correct_mean (verifier);
zero_variance_share (groups with all-equal rewards at the first draw; _final after dynamic sampling); focal_mean
(g over all groups) and focal_mean_active (over groups with mixed rewards, the only ones g acts on); clip_frac_low /
clip_frac_high (share of loss tokens whose gradient the clip removes; for CISPO, whose IS weight is clipped); kl
(mean k3 KL to the SFT start, only when kl_beta > 0, else 0: no reference is kept); entropy (mean per-token policy
entropy); loss; grad_norm (pre-clip, last mini-batch); lr; completion_len; truncated_share; step_s, gen_s, train_s;
tokens_per_s (completion tokens generated per second of step); bytes_allreduced; eval_greedy every eval_every.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.generation.sampling import warn_if_truncated
from essaflow.grpo.loop import (
    CheckpointWritten,
    Finished,
    RankStarted,
    Resumed,
    StepDone,
    WorkerEvent,
    WorkerInfo,
    output_name,
    run_worker,
)
from essaflow.model.devices import resolve_device
from essaflow.training.contract import TrainCallbacks, TrainResult
from essaflow.training.usage import Usage

log = logging.getLogger(__name__)


class _Driver:
    """Collects the workers' events into callbacks and the pieces of the TrainResult."""

    def __init__(self, callbacks: TrainCallbacks, cap: int):
        self.callbacks = callbacks
        self.cap = cap
        self.warned = False
        self.starts: list[RankStarted] = []
        self.finished: Finished | None = None
        self.truncated: list[float] = []

    def __call__(self, event: WorkerEvent) -> None:
        match event:
            case StepDone(row):
                if "truncated_share" in row:
                    self.truncated.append(float(row["truncated_share"]))
                    if not self.warned:  # once per run: the share is in every step's metrics
                        self.warned = warn_if_truncated(
                            row["truncated_share"], f"GRPO step {row.get('step')}", self.cap
                        )
                self.callbacks.metrics(row)
            case CheckpointWritten(path):
                self.callbacks.checkpoint(Path(path))
            case Resumed(step):
                log.info("resumed from step %d", step)
            case RankStarted(rank, world_size, node):
                self.starts.append(event)
                log.info("GRPO rank %d of %d on node %s", rank, world_size, node[:8])
            case Finished():
                self.finished = event


def train_grpo(
    cfg: PipelineConfig,
    splits: Splits,
    sft_adapter: Path,
    out_dir: Path,
    checkpoint_dir: Path | None = None,
    on_metrics=None,
    on_checkpoint=None,
) -> TrainResult:
    """Train from the SFT adapter; the result goes to out_dir/"adapter" (parameters=full: a full checkpoint in
    out_dir/"model").

    grpo.workers.count == 1 runs the loop in this process (world size 1: nothing is all-reduced); more (or
    `ray_for_single_worker`) runs the same loop on Ray Train workers with DDP. With checkpoint_dir, training
    resumes from its latest complete checkpoint and checkpoints every `checkpoint_every` steps and at the end.
    """
    # absolute paths: Ray workers run in their own working directories
    out_dir, sft_adapter = Path(out_dir).resolve(), Path(sft_adapter).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir).resolve()
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    driver = _Driver(TrainCallbacks(on_metrics, on_checkpoint), cfg.grpo.max_new_tokens or cfg.sampling.max_new_tokens)
    start = time.perf_counter()
    if cfg.grpo.workers.count == 1 and not cfg.grpo.ray_for_single_worker:
        info = WorkerInfo(0, 1, resolve_device(cfg.grpo.device, field="grpo.device"))
        run_worker(cfg, splits.train, splits.eval, sft_adapter, out_dir, checkpoint_dir, info, driver)
    else:
        from essaflow.grpo.distributed import run_on_ray  # imports Ray only when a run uses it

        run_on_ray(cfg, splits, sft_adapter, out_dir, checkpoint_dir, driver)
    done = driver.finished
    return TrainResult(
        output_dir=out_dir / output_name(cfg.grpo.parameters),
        output_kind="full" if cfg.grpo.parameters == "full" else "lora",
        steps=done.steps,
        wall_s=round(time.perf_counter() - start, 3),
        bytes_per_update=done.bytes_per_update,
        metrics=done.metrics,  # includes the steps before a resume (kept in the checkpoint)
        resumed_from=done.resumed_from,
        work_by_node=dict(Counter(s.node[:8] for s in driver.starts).most_common()),
        worker_failures=max(0, sum(1 for s in driver.starts if s.rank == 0) - 1),  # group restarts
        truncated_share=round(sum(driver.truncated) / len(driver.truncated), 4) if driver.truncated else None,
        usage=step_usage(done.metrics, done.resumed_from),
        sharding=done.sharding,
        memory_per_rank=done.memory_per_rank,
    )


def step_usage(metrics: list[dict], resumed_from: int | None) -> Usage:
    """What this call's steps cost (the rows before a resume were paid by the earlier call)."""
    usage = Usage()
    for m in metrics:
        if "gen_tokens" in m and m.get("step", 0) > (resumed_from or 0):
            usage.add(Usage(m["gen_tokens"], m.get("forward_tokens", 0), m.get("backward_tokens", 0),
                            m.get("device_s", 0.0)))  # fmt: skip
    return usage


__all__ = ["train_grpo"]
