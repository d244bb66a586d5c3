"""The GRPO-family loop (GRPO, DAPO, CISPO + F-GRPO's focal weight) from the SFT start: `train_grpo`, and the loop one
worker (rank) runs, `run_worker` (FGRPO-v2 App. L; docs/algorithms.md sec. 3).

One loop runs on every worker: in this process for one worker, or on Ray Train ranks (`distributed.py`), as DDP
replicas or FSDP2 shards (`sharding.py`). Per rollout step it runs `step.train_step`, records the step's metrics, a
held-out evaluation now and then and a checkpoint now and then (`checkpoint.py`), and tells the driver through
typed events (`worker_io.py`); the driver turns them into the caller's callbacks and a TrainResult. The gradients are
the same on 1 or N ranks (`step.py`, `batch_split.py`).

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
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from essaflow.config import PipelineConfig, section_trajectory
from essaflow.data import Splits
from essaflow.data.schema import Problem
from essaflow.generation.sampling import TransformersGenerator, warn_if_truncated
from essaflow.grpo.checkpoint import output_name, restore_training_state, save_checkpoint, save_output
from essaflow.grpo.config import resolved_sharding
from essaflow.grpo.learner import Learner
from essaflow.grpo.rollout import worker_slots
from essaflow.grpo.sharding import process_group
from essaflow.grpo.step import train_step
from essaflow.grpo.worker_group import WorkerInfo
from essaflow.grpo.worker_io import (
    CheckpointWritten,
    Emit,
    Finished,
    RankStarted,
    Resumed,
    StepDone,
    WorkerEvent,
    WorkerInputs,
)
from essaflow.judging.evaluation import greedy_accuracy
from essaflow.model.devices import resolve_device
from essaflow.storage.checkpoint_dirs import latest_checkpoint
from essaflow.trainer_io import TrainCallbacks, TrainResult
from essaflow.usage import Usage

log = logging.getLogger(__name__)


def run_worker(inputs: WorkerInputs, info: WorkerInfo, emit: Emit) -> None:
    """The whole training loop as seen by one worker. Rank 0 reports steps, checkpoints and the end via `emit`."""
    torch.set_num_threads(inputs.cfg.model.torch_threads)
    with process_group(resolved_sharding(inputs.cfg.grpo), info):
        train_worker(inputs, info, emit)


def train_worker(inputs: WorkerInputs, info: WorkerInfo, emit: Emit) -> None:
    """Resume if a checkpoint exists, run the steps, then save the policy; `emit` hears every step and the end."""
    cfg, g, checkpoint_dir = inputs.cfg, inputs.cfg.grpo, inputs.checkpoint_dir
    resume = latest_checkpoint(checkpoint_dir)
    learner = Learner.build(cfg, inputs.start, resume, info, inputs.judge)
    first, history = 0, []
    if resume is not None:
        first, history = restore_training_state(learner, resume)
        emit(Resumed(first))
    slots = worker_slots(g.prompts_per_step, info.world_size, info.rank)
    trajectory = section_trajectory(cfg, "grpo")
    wall0, done = time.perf_counter(), first
    while done < g.steps and not out_of_time(g.time_budget_s, history):
        metrics, done = train_step(learner, inputs.train, slots, done), done + 1
        last = done == g.steps or out_of_time(g.time_budget_s, history, metrics.wall_s_mean)
        if g.eval_every and (done % g.eval_every == 0 or last) and inputs.eval_problems:
            metrics.eval_greedy = held_out(learner, inputs.eval_problems)  # None on ranks other than 0
        history.append(metrics.as_row())
        emit(StepDone(history[-1]))
        if not math.isfinite(metrics.loss):
            raise FloatingPointError(f"non-finite loss at step {done}: {history[-1]}")
        if checkpoint_dir is not None and ((g.checkpoint_every and done % g.checkpoint_every == 0) or last):
            state = {"step": done, "world_size": info.world_size, "metrics": history, "trajectory": trajectory}
            if (path := save_checkpoint(learner, Path(checkpoint_dir), done, state)) is not None:
                emit(CheckpointWritten(str(path)))
    memory = memory_per_rank(learner)
    save_output(learner, inputs.out_dir / output_name(g.parameters))
    if info.rank == 0:
        bytes_per_update = history[-1]["bytes_allreduced"] if history else 0
        resumed_from = first if resume is not None else None
        wall_s = time.perf_counter() - wall0
        emit(Finished(done, wall_s, bytes_per_update, resumed_from, history, learner.dp.sharding, memory))


def held_out(learner: Learner, problems: list[Problem]) -> float | None:
    """Held-out greedy accuracy, decoded by rank 0 (every rank calls: fsdp gathers the weights first)."""
    cfg = learner.cfg
    with learner.dp.gathered():
        if learner.info.rank != 0:
            return None
        gen = TransformersGenerator(learner.model, learner.tokenizer, cfg.sampling.batch_size, cfg.data.prompt_format())
        return greedy_accuracy(gen, problems, learner.max_new_tokens, learner.judge or cfg.eval.reward)


def memory_per_rank(learner: Learner) -> dict[str, int]:
    """This rank's bytes of params, grads and optimizer state, the largest over ranks (shards may be uneven)."""
    row = learner.dp.memory(learner.params, learner.optimizer)
    most = torch.tensor(list(row.values()), dtype=torch.int64)
    if learner.info.world_size > 1:
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return dict(zip(row, map(int, most.tolist())))


def out_of_time(budget_s: float | None, history: list[dict[str, Any]], more_s: float = 0.0) -> bool:
    """grpo.time_budget_s spent by the recorded steps (+ more_s); every rank reads the same all-reduced clock, and
    the history carries it over a resume."""
    return budget_s is not None and sum(m.get("wall_s_mean", 0.0) for m in history) + more_s >= budget_s


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

    One rank runs the loop in this process (world size 1: nothing is all-reduced); 2 or more (or
    grpo.workers.ray=true) run the same loop on Ray Train workers with DDP (`GRPOConfig.on_ray`). With
    checkpoint_dir, training resumes from its latest complete checkpoint and checkpoints every `checkpoint_every`
    steps and at the end.
    """
    # absolute paths: Ray workers run in their own working directories
    out_dir, sft_adapter = Path(out_dir).resolve(), Path(sft_adapter).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir).resolve()
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    driver = _Driver(TrainCallbacks(on_metrics, on_checkpoint), cfg.grpo.max_new_tokens or cfg.sampling.max_new_tokens)
    start = time.perf_counter()
    if not cfg.grpo.on_ray:
        info = WorkerInfo(0, 1, resolve_device(cfg.grpo.device, field="grpo.device"))
        run_worker(WorkerInputs(cfg, splits.train, splits.eval, sft_adapter, out_dir, checkpoint_dir), info, driver)
    else:
        from essaflow.grpo.distributed import run_on_ray  # imports Ray only when a run uses it

        run_on_ray(cfg, splits, sft_adapter, out_dir, checkpoint_dir, driver, run_worker)
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
