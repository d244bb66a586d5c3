"""The GRPO-family loop as one worker runs it, in-process or as a Ray Train rank (DDP replica or FSDP2 shard).

Per rollout step, all in `Learner.step` (FGRPO-v2 App. L; docs/algorithms.md sec. 3):
  rollout     sample G completions for this worker's prompt groups and score them (rollout.py);
  advantages  group-normalised, focal-weighted by (1 - success_rate)^gamma (advantages.py);
  loss        per micro-batch, the registered surrogate (+ KL) normalised by the mini-batch's global token and
              sequence counts and scaled by the world size to undo DDP's (FSDP's) averaging, so the gradient
              summed over workers is the single-worker gradient of the same batch (losses.py, minibatch.py);
  step        AdamW after grad-norm clipping, once per global mini-batch; the LR scheduler (linear warm-up, then
              constant) once per rollout step, as verl does.
pi_old: with one mini-batch the update is on-policy, so pi_old = pi_theta.detach() of the same forward (r = 1
exactly; verl does the same); with several it comes from a no-grad pass before the first. Dropout stays off (the
model is in eval mode) so that on-policy ratios are exactly 1. The step's metrics are kept by `metrics.StepMeter`;
run_worker records them, a held-out evaluation now and then, and a checkpoint now and then. How the ranks hold
the weights (DDP replicas, FSDP2 shards with float32 masters) is sharding.py's concern.

A worker tells the driver what happens through typed events (rank 0 only, except `RankStarted`).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from essaflow.config import PipelineConfig, changed_trajectory, method_trajectory
from essaflow.data.schema import Problem
from essaflow.generation.sampling import TransformersGenerator, resolve_backend
from essaflow.grpo import checkpoint as ckpt
from essaflow.grpo.advantages import group_advantages
from essaflow.grpo.comm import CommCounter, WorkerInfo
from essaflow.grpo.config import resolved_sharding
from essaflow.grpo.engine import PolicyEngine, logprob_gap
from essaflow.grpo.losses import policy_loss, resolve_clip
from essaflow.grpo.metrics import StepMeter, StepMetrics
from essaflow.grpo.minibatch import frozen_logprobs, global_counts, micro_batches, mini_batch_rows
from essaflow.grpo.rollout import collect, token_logprobs, worker_slots
from essaflow.grpo.sharding import DataParallel, process_group, wrap
from essaflow.judging.evaluation import greedy_accuracy
from essaflow.model.loading import (
    load_adapter,
    load_base_model,
    load_tokenizer,
    resolve_model_path,
    save_adapter_atomic,
)
from essaflow.storage.atomic_dir import atomic_dir


@dataclass(frozen=True)
class RankStarted:
    """A rank started (again, after a group restart) on a Ray node."""

    rank: int
    world_size: int
    node: str


@dataclass(frozen=True)
class Resumed:
    """Training continues from the checkpoint of this step."""

    step: int


@dataclass(frozen=True)
class StepDone:
    """Metrics of one finished rollout step (a StepMetrics row)."""

    row: dict[str, Any]


@dataclass(frozen=True)
class CheckpointWritten:
    """A complete checkpoint directory was committed."""

    path: str


@dataclass(frozen=True)
class Finished:
    """Training ended; the result is in out_dir/output_name(grpo.parameters)."""

    steps: int
    wall_s: float
    bytes_per_update: float
    resumed_from: int | None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    sharding: str = "ddp"
    memory_per_rank: dict[str, int] = field(default_factory=dict)
    """Bytes of params, grads, optimizer (and their total) one rank holds, the largest over ranks."""


WorkerEvent = RankStarted | Resumed | StepDone | CheckpointWritten | Finished
Emit = Callable[[WorkerEvent], None]


def output_name(parameters: str) -> str:
    """The result's directory name in out_dir: "adapter" (a peft LoRA adapter) or "model" (parameters=full)."""
    return "model" if parameters == "full" else "adapter"


def build_policy(cfg: PipelineConfig, start: Path, resume: Path | None, device: torch.device) -> torch.nn.Module:
    """The trainable policy: SFT LoRA adapter (trainable) on the base, or the merged SFT model (all weights)."""
    if cfg.grpo.parameters == "lora":
        # an fsdp checkpoint holds no adapter directory: its shards load over the start's weights (restore)
        source = resume / "adapter" if resume and (resume / "adapter").is_dir() else start
        model = load_adapter(load_base_model(cfg.model), source, trainable=True)
    elif resume is not None and (resume / "model").is_dir():  # fsdp shards load into the start's weights
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resume / "model", dtype=getattr(torch, cfg.model.dtype))
    else:
        model = load_adapter(load_base_model(cfg.model), start).merge_and_unload()
        for p in model.parameters():
            p.requires_grad_(True)
    model.eval()  # no dropout in RL: on-policy ratios are exactly 1
    return model.to(device)


def make_optimizer(cfg: PipelineConfig, params: list[torch.nn.Parameter]):
    """AdamW and the per-rollout-step LR schedule: linear warm-up over grpo.warmup_steps, then constant."""
    g = cfg.grpo
    optimizer = torch.optim.AdamW(params, lr=g.lr, betas=(0.9, 0.999), weight_decay=g.weight_decay)
    warm = g.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    return optimizer, scheduler


@dataclass
class Learner:
    """What one worker trains with: the policy (as the ranks hold it), optimiser, reference model, counters."""

    cfg: PipelineConfig
    info: WorkerInfo
    tokenizer: Any
    model: torch.nn.Module
    dp: DataParallel
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    ref_model: torch.nn.Module | None
    comm: CommCounter
    engine: PolicyEngine | None = None
    """The rank's vLLM engine (sampling.backend=vllm, grpo/engine.py); None: rollouts on the model's generate."""

    @classmethod
    def build(cls, cfg: PipelineConfig, start: Path, resume: Path | None, info: WorkerInfo) -> Learner:
        model = build_policy(cfg, start, resume, info.device)
        ref_model = None
        if cfg.grpo.kl_beta > 0:  # the reference is the SFT start, also after a resume
            ref_model = build_policy(cfg, start, None, info.device).requires_grad_(False)
        comm, dtype = CommCounter(), getattr(torch, cfg.model.dtype)
        dp = wrap(model, resolved_sharding(cfg.grpo), info, comm, dtype, cfg.grpo.activation_checkpointing)
        params = [p for p in model.parameters() if p.requires_grad]  # fsdp: this rank's float32 shards
        optimizer, scheduler = make_optimizer(cfg, params)
        tok = load_tokenizer(cfg.model)
        engine = None
        if resolve_backend(cfg.sampling.backend) == "vllm":
            path = resolve_model_path(cfg.model.name_or_path)
            m = cfg.model
            engine = PolicyEngine(path, m.dtype, cfg.sampling.vllm, cfg.grpo.parameters, m.lora_rank)
            with dp.gathered():
                engine.sync(model)  # the start (or the resumed weights) before the first rollout
        return cls(cfg, info, tok, model, dp, params, optimizer, scheduler, ref_model, comm, engine)

    @property
    def trainable_bytes(self) -> int:
        """Bytes of the trainable parameters (what one all-reduce of the gradients carries)."""
        return sum(p.numel() * p.element_size() for p in self.params)

    @property
    def max_new_tokens(self) -> int:
        return self.cfg.grpo.max_new_tokens or self.cfg.sampling.max_new_tokens

    def step(self, train: list[Problem], slots: list[int], step: int) -> StepMetrics:
        """One rollout step: rollout -> advantages -> loss -> optimiser step; returns the step's global metrics."""
        g, info, meter = self.cfg.grpo, self.info, StepMeter.start(self.info, self.comm)
        # rollout: G completions per prompt group, verifier rewards (and shaped ones), on the whole policy
        with self.dp.gathered():
            batch = collect(
                self.model, self.tokenizer, train, slots, step, g, self.cfg.eval.reward, self.max_new_tokens,
                self.cfg.data.prompt_format(), self.engine,
            )  # fmt: skip
        if self.engine is not None:
            self.engine.after_rollout()
        # advantages: the estimator by name, then the focal weight (1 - mu_hat)^gamma, once for every loss
        adv = group_advantages(batch.rewards, batch.correct, g.advantage, g.std_mode, g.adv_eps, g.gamma)
        advantages = adv.advantages.reshape(-1)
        ref_logp = None if self.ref_model is None else frozen_logprobs(self.ref_model, batch, g.temperature)
        sums = meter.rollout_done(batch, adv)
        old_logp = (
            None if g.mini_batches == 1 else frozen_logprobs(self.model, batch, g.temperature, g.micro_batch_size)
        )
        clip, grad_norm = resolve_clip(g.loss, g.clip_eps_low, g.clip_eps_high), 0.0
        for m_idx, rows in enumerate(mini_batch_rows(batch, g.prompts_per_step, g.mini_batches)):
            num_tokens, num_seqs = global_counts(batch, rows, info, self.comm)
            self.optimizer.zero_grad(set_to_none=True)
            pieces = micro_batches(rows, g.micro_batch_size)
            for k, r in enumerate(pieces):
                sync = info.world_size == 1 or k == len(pieces) - 1  # all-reduce once, after the last micro-batch
                with self.dp.accumulate(sync):
                    # loss: the surrogate (+ KL) of the micro-batch, normalised by the mini-batch's global counts
                    ids, attention = batch.input_ids[r], batch.attention_mask[r]
                    logp, entropy = token_logprobs(
                        self.dp.module, ids, attention, batch.prompt_width, g.temperature, True
                    )
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
            grad_norm = self.dp.clip_grad_norm(self.params, g.grad_clip)
            self.optimizer.step()
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        frozen_passes = (old_logp is not None) + (ref_logp is not None)
        metrics = meter.finish(step + 1, sums, batch, grad_norm, lr, frozen_passes, self.trainable_bytes)
        if self.engine is not None:
            # the gap is all-reduced: every rank fails together when the engine sampled from stale weights
            self.engine.check(metrics.engine_logprob_gap or 0.0)
            with self.dp.gathered():
                self.engine.sync(self.model)  # the updated policy, before the next rollout
        return metrics

    def held_out(self, problems: list[Problem]) -> float | None:
        """Held-out greedy accuracy, decoded by rank 0 (every rank calls: fsdp gathers the weights first)."""
        with self.dp.gathered():
            if self.info.rank != 0:
                return None
            gen = TransformersGenerator(
                self.model, self.tokenizer, self.cfg.sampling.batch_size, self.cfg.data.prompt_format()
            )
            return greedy_accuracy(gen, problems, self.max_new_tokens, self.cfg.eval.reward)

    def memory(self) -> dict[str, int]:
        """This rank's bytes of params, grads and optimizer state, the largest over ranks (shards may be uneven)."""
        row = self.dp.memory(self.params, self.optimizer)
        most = torch.tensor(list(row.values()), dtype=torch.int64)
        if self.info.world_size > 1:
            dist.all_reduce(most, op=dist.ReduceOp.MAX)
        return dict(zip(row, map(int, most.tolist())))

    def save_output(self, out: Path) -> None:
        """The trained policy, once: a peft adapter or (full) one Hugging Face checkpoint gathered from the ranks."""
        if self.dp.sharding == "ddp":
            if self.info.rank == 0:
                save_adapter_atomic(self.model, out, self.tokenizer)
            return
        if self.cfg.grpo.parameters == "lora":  # the factors gathered from the shards; the base is not ours to save
            factors = self.dp.trainable_weights()
            if self.info.rank == 0:
                save_adapter_atomic(self.model, out, self.tokenizer, state_dict=factors)
            return
        weights = self.dp.full_state_dict()  # every rank takes part; rank 0 receives the whole policy
        if self.info.rank != 0:
            return
        dtype = getattr(torch, self.cfg.model.dtype)
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}  # e.g. lm_head = embed_tokens: stored once
        weights = {k: v.to(dtype) for k, v in weights.items() if k not in tied}
        with atomic_dir(out) as tmp:  # in model.dtype, as a full checkpoint is published
            self.model.config.dtype = dtype
            self.model.save_pretrained(tmp, state_dict=weights)
            self.tokenizer.save_pretrained(tmp)

    def save_checkpoint(self, root: Path, done: int, state: dict[str, Any]) -> Path | None:
        """All ranks save their RNG (and, fsdp, their shard); rank 0 the rest and commits. Rank 0 gets the path."""
        stage = ckpt.staging_dir(root, done)
        if self.info.rank == 0:
            if stage.exists():
                shutil.rmtree(stage)
            stage.mkdir(parents=True)
        self._barrier()
        ckpt.save_rng(stage, self.info.rank)
        state = {**state, "sharding": self.dp.sharding}
        if self.dp.sharding == "fsdp":
            ckpt.save_sharded(stage, self.model, self.optimizer)
        self._barrier()
        if self.info.rank != 0:
            return None
        if self.dp.sharding == "fsdp":
            ckpt.save_scheduler_and_state(stage, self.scheduler, state)
        else:
            ckpt.save_training_state(stage, self.model, self.cfg.grpo.parameters, self.optimizer, self.scheduler, state)
        return ckpt.commit(stage, root, done)

    def restore(self, resume: Path) -> tuple[int, list[dict[str, Any]]]:
        """Optimiser, scheduler and RNG from a checkpoint (the weights came with the policy); (step, history)."""
        state = ckpt.load_trainer_state(resume)
        changed = changed_trajectory(state.get("trajectory", {}), method_trajectory(self.cfg, "fgrpo"))
        if changed:
            raise ValueError(
                f"checkpoint {resume} was written with different settings ({', '.join(changed)}); resuming would "
                "not replay the run. Use a fresh checkpoint directory or restore the settings."
            )
        if ckpt.is_sharded(resume):
            ckpt.load_sharded(resume, self.model, self.optimizer)
            ckpt.load_scheduler(resume, self.scheduler)
        elif self.dp.sharding == "fsdp":
            raise ValueError(
                f"checkpoint {resume} holds DDP replicas (grpo.sharding=ddp): resume it with --set grpo.sharding=ddp"
            )
        else:
            ckpt.load_optimizer_and_scheduler(resume, self.optimizer, self.scheduler, self.info.device)
        ckpt.load_rng(resume, self.info.rank)
        return state["step"], state["metrics"]

    def _barrier(self) -> None:
        if self.info.world_size > 1:
            dist.barrier()


def run_worker(
    cfg: PipelineConfig,
    train: list[Problem],
    eval_problems: list[Problem],
    start: Path,
    out_dir: Path,
    checkpoint_dir: Path | None,
    info: WorkerInfo,
    emit: Emit,
) -> None:
    """The whole training loop as seen by one worker. Rank 0 reports steps, checkpoints and the end via `emit`."""
    g = cfg.grpo
    torch.set_num_threads(cfg.model.torch_threads)
    with process_group(resolved_sharding(g), info):
        _train(cfg, train, eval_problems, start, out_dir, checkpoint_dir, info, emit)


def _train(
    cfg: PipelineConfig,
    train: list[Problem],
    eval_problems: list[Problem],
    start: Path,
    out_dir: Path,
    checkpoint_dir: Path | None,
    info: WorkerInfo,
    emit: Emit,
) -> None:
    g = cfg.grpo
    resume = ckpt.latest_checkpoint(checkpoint_dir)
    learner = Learner.build(cfg, start, resume, info)
    first, history = 0, []
    if resume is not None:
        first, history = learner.restore(resume)
        emit(Resumed(first))
    slots = worker_slots(g.prompts_per_step, info.world_size, info.rank)
    trajectory = method_trajectory(cfg, "fgrpo")
    wall0, done = time.perf_counter(), first
    while done < g.steps and not out_of_time(g.time_budget_s, history):
        metrics, done = learner.step(train, slots, done), done + 1
        last = done == g.steps or out_of_time(g.time_budget_s, history, metrics.wall_s_mean)
        if g.eval_every and (done % g.eval_every == 0 or last) and eval_problems:
            metrics.eval_greedy = learner.held_out(eval_problems)  # None on ranks other than 0
        history.append(metrics.as_row())
        emit(StepDone(history[-1]))
        if not math.isfinite(metrics.loss):
            raise FloatingPointError(f"non-finite loss at step {done}: {history[-1]}")
        if checkpoint_dir is not None and ((g.checkpoint_every and done % g.checkpoint_every == 0) or last):
            state = {"step": done, "world_size": info.world_size, "metrics": history, "trajectory": trajectory}
            if (path := learner.save_checkpoint(Path(checkpoint_dir), done, state)) is not None:
                emit(CheckpointWritten(str(path)))
    memory = learner.memory()
    learner.save_output(out_dir / output_name(g.parameters))
    if info.rank == 0:
        bytes_per_update = history[-1]["bytes_allreduced"] if history else 0
        resumed_from = first if resume is not None else None
        wall_s = time.perf_counter() - wall0
        emit(Finished(done, wall_s, bytes_per_update, resumed_from, history, learner.dp.sharding, memory))


def out_of_time(budget_s: float | None, history: list[dict[str, Any]], more_s: float = 0.0) -> bool:
    """grpo.time_budget_s spent by the recorded steps (+ more_s); every rank reads the same all-reduced clock, and
    the history carries it over a resume."""
    return budget_s is not None and sum(m.get("wall_s_mean", 0.0) for m in history) + more_s >= budget_s
