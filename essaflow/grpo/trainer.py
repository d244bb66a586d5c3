"""The GRPO-family learner: one loop that runs on every worker, in-process or under Ray Train DDP.

Per rollout step (docs/algorithms.md sec. 3, FGRPO-v2 App. L):
  1. each worker samples G completions for its own prompt groups (rollout.py; a group never spans workers),
     scores them, and computes focal-weighted group advantages (advantages.py);
  2. the step's groups are split into `mini_batches` global mini-batches (the same slots whatever the worker
     count); for each, every worker backpropagates its share of the loss, DDP all-reduces the gradients, and
     AdamW takes one step after grad-norm clipping;
  3. the LR scheduler (linear warm-up, then constant) steps once per rollout step, as verl does.

Exactness across worker counts: loss pieces are normalised by *global* token / sequence counts (a 16-byte
all-reduce per mini-batch) and multiplied by the world size to undo DDP's gradient averaging, so the summed
gradient equals the single-worker gradient of the same batch.

Bytes all-reduced per rollout step, measured by a DDP communication hook (0 in a one-process run):
    bytes_per_step = mini_batches * sum over trainable parameters p of numel(p) * element_size(p)
(the payload each worker contributes; a ring all-reduce moves 2 (W - 1) / W times that per worker).
Metrics and normalisers add `aux_bytes` per step (float64 sums), reported separately.

Metrics per step (global over workers): reward_mean (shaped) and correct_mean (verifier); zero_variance_share
(groups with all-equal rewards at the first draw; _final after dynamic sampling); focal_mean (g over all groups)
and focal_mean_active (over groups with mixed rewards, the only ones g acts on); clip_frac_low / clip_frac_high
(share of loss tokens whose gradient the clip removes; for CISPO, whose IS weight is clipped); kl (mean k3 KL to
the SFT start, only when kl_beta > 0, else 0: no reference is kept); entropy (mean per-token policy entropy);
loss; grad_norm (pre-clip, last mini-batch); lr; completion_len; truncated_share; step_s, gen_s, train_s;
tokens_per_s (completion tokens generated per second of step); bytes_allreduced; eval_greedy every eval_every.

Old log-probs: with one mini-batch the update is on-policy, so pi_old = pi_theta.detach() of the same forward
(r = 1 exactly; verl does the same); with several mini-batches they come from a no-grad pass before the first.
Dropout is off during RL (the model stays in eval mode) so that r = 1 really holds on-policy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.data.schema import Problem
from essaflow.evaluation import greedy_accuracy
from essaflow.grpo import checkpoint as ckpt
from essaflow.grpo.losses import policy_loss, resolve_clip
from essaflow.grpo.rollout import RolloutBatch, RolloutSettings, collect, token_logprobs, worker_slots
from essaflow.models import load_adapter, load_base_model, load_tokenizer, save_adapter
from essaflow.results import TrainResult
from essaflow.sampling import TransformersGenerator

log = logging.getLogger(__name__)

Emit = Callable[[str, Any], None]


@dataclass
class WorkerInfo:
    rank: int
    world_size: int
    device: torch.device


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return torch.device("cpu")


def build_policy(cfg: PipelineConfig, start: Path, resume: Path | None, device: torch.device) -> torch.nn.Module:
    """The trainable policy: SFT LoRA adapter (trainable) on the base, or the merged SFT model (all weights)."""
    if cfg.grpo.parameters == "lora":
        source = resume / "adapter" if resume else start
        model = load_adapter(load_base_model(cfg.model), source, trainable=True)
    elif resume is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resume / "model", dtype=getattr(torch, cfg.model.dtype))
    else:
        model = load_adapter(load_base_model(cfg.model), start).merge_and_unload()
        for p in model.parameters():
            p.requires_grad_(True)
    model.eval()  # no dropout in RL: on-policy ratios are exactly 1
    return model.to(device)


def _settings(cfg: PipelineConfig) -> RolloutSettings:
    g = cfg.grpo
    return RolloutSettings(
        group_size=g.group_size,
        temperature=g.temperature,
        top_p=g.top_p,
        max_new_tokens=g.max_new_tokens or cfg.sampling.max_new_tokens,
        reward=cfg.eval.reward,
        advantage=g.advantage,
        std_mode=g.std_mode,
        adv_eps=g.adv_eps,
        gamma=g.gamma,
        dynamic_sampling=g.dynamic_sampling,
        dynamic_sampling_rounds=g.dynamic_sampling_rounds,
        overlong_buffer=g.overlong_buffer,
        overlong_penalty=g.overlong_penalty,
        overlong_filter=g.overlong_filter,
        seed=g.seed,
    )


def _all_reduce(t: torch.Tensor, info: WorkerInfo, counter: dict[str, int]) -> torch.Tensor:
    if info.world_size > 1:
        dist.all_reduce(t)
        counter["aux"] += t.numel() * t.element_size()
    return t


def _chunks(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows] if size <= 0 or size >= len(rows) else list(torch.split(rows, size))


# Sums gathered per step on every worker and all-reduced once (order = _SUM_KEYS).
_SUM_KEYS = [
    "seqs", "reward", "correct", "groups", "uniform_first", "uniform", "focal", "focal_active", "active",
    "tokens", "clip_low", "clip_high", "kl", "entropy", "loss", "gen_tokens", "retried", "truncated",
]  # fmt: skip


def _update(
    ddp: torch.nn.Module,
    batch: RolloutBatch,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    cfg: PipelineConfig,
    info: WorkerInfo,
    sums: dict[str, float],
    comm: dict[str, int],
) -> float:
    """All mini-batch updates of one rollout step; returns the last pre-clip gradient norm."""
    g = cfg.grpo
    clip = resolve_clip(g.loss, g.clip_eps_low, g.clip_eps_high)
    per_mb = g.prompts_per_step // g.mini_batches
    width = batch.completion_ids.shape[1]
    grad_norm = 0.0
    if g.mini_batches > 1:  # pi_old for later mini-batches: a no-grad pass before any update
        with torch.no_grad():
            batch.old_logp = torch.cat(
                [
                    token_logprobs(ddp.module if info.world_size > 1 else ddp, batch.input_ids[r],
                                   batch.attention_mask[r], batch.prompt_width, g.temperature)[0].cpu()
                    for r in _chunks(torch.arange(len(batch.input_ids)), g.micro_batch_size)
                ]
            )  # fmt: skip
    for m in range(g.mini_batches):
        groups = [i for i, s in enumerate(batch.slots) if s // per_mb == m]
        rows = batch.rows_of(groups)
        counts = torch.tensor([float(batch.loss_mask[rows].sum()), float(len(rows))], dtype=torch.float64)
        num_tokens, num_seqs = _all_reduce(counts, info, comm).tolist()
        optimizer.zero_grad(set_to_none=True)
        pieces = _chunks(rows, g.micro_batch_size)
        for k, r in enumerate(pieces):
            sync = info.world_size == 1 or k == len(pieces) - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                logp, entropy = token_logprobs(
                    ddp, batch.input_ids[r], batch.attention_mask[r], batch.prompt_width, g.temperature, True
                )
                old = logp.detach() if batch.old_logp is None else batch.old_logp[r].to(logp.device)
                ref = None if batch.ref_logp is None else batch.ref_logp[r].to(logp.device)
                mask = batch.loss_mask[r].to(logp.device)
                out = policy_loss(
                    g.loss, logp, old, batch.advantages[r].to(logp.device), mask, clip, g.aggregation,
                    ref, g.kl_beta, num_tokens, num_seqs, width,
                )  # fmt: skip
                (out.loss * info.world_size).backward()
            with torch.no_grad():
                sums["clip_low"] += float((out.indicators["clip_low"] * mask).sum())
                sums["clip_high"] += float((out.indicators["clip_high"] * mask).sum())
                sums["entropy"] += float((entropy * mask).sum())
                sums["kl"] += 0.0 if out.kl is None else float((out.kl * mask).sum())
                sums["loss"] += out.loss.item() / g.mini_batches
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, g.grad_clip))
        optimizer.step()
    return grad_norm


def _step_metrics(sums: dict[str, float], step: int, info: WorkerInfo, comm: dict[str, int]) -> dict[str, Any]:
    vec = _all_reduce(torch.tensor([sums[k] for k in _SUM_KEYS], dtype=torch.float64), info, comm)
    s = dict(zip(_SUM_KEYS, vec.tolist()))
    tokens, groups = max(s["tokens"], 1.0), max(s["groups"], 1.0)
    return {
        "step": step,
        "reward_mean": s["reward"] / max(s["seqs"], 1.0),
        "correct_mean": s["correct"] / max(s["seqs"], 1.0),
        "zero_variance_share": s["uniform_first"] / groups,
        "zero_variance_share_final": s["uniform"] / groups,
        "focal_mean": s["focal"] / groups,
        "focal_mean_active": s["focal_active"] / max(s["active"], 1.0),
        "clip_frac_low": s["clip_low"] / tokens,
        "clip_frac_high": s["clip_high"] / tokens,
        "kl": s["kl"] / tokens,
        "entropy": s["entropy"] / tokens,
        "loss": s["loss"],
        "completion_len": s["gen_tokens"] / max(s["seqs"], 1.0),
        "truncated_share": s["truncated"] / max(s["seqs"], 1.0),
        "retried_groups": int(s["retried"]),
        "gen_tokens": int(s["gen_tokens"]),
    }


def _batch_sums(batch: RolloutBatch) -> dict[str, float]:
    sums = dict.fromkeys(_SUM_KEYS, 0.0)
    active = ~batch.uniform
    sums.update(
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
    return sums


def _save_checkpoint(
    root: Path, done: int, info: WorkerInfo, model, cfg, optimizer, scheduler, state: dict, emit: Emit
) -> None:
    stage = ckpt.staging_dir(root, done)
    if info.rank == 0:
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
    if info.world_size > 1:
        dist.barrier()
    ckpt.save_rng(stage, info.rank)
    if info.world_size > 1:
        dist.barrier()
    if info.rank == 0:
        ckpt.save_training_state(stage, model, cfg.grpo.parameters, optimizer, scheduler, state)
        emit("checkpoint", str(ckpt.commit(stage, root, done)))


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
    """The whole training loop as seen by one worker. Rank 0 reports metrics/checkpoints through `emit`."""
    g = cfg.grpo
    torch.set_num_threads(cfg.model.torch_threads)
    tok = load_tokenizer(cfg.model)
    resume = ckpt.latest_checkpoint(checkpoint_dir)
    model = build_policy(cfg, start, resume, info.device)
    ref_model = None
    if g.kl_beta > 0:  # the reference is the SFT start, also after a resume
        ref_model = build_policy(cfg, start, None, info.device).requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    comm = {"grad": 0, "aux": 0}
    ddp: torch.nn.Module = model
    if info.world_size > 1:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(
            model, device_ids=[info.device.index] if info.device.type == "cuda" else None, forward_sync_buffers=False
        )

        def counting_hook(state: dict, bucket):  # measure what DDP really reduces
            state["grad"] += bucket.buffer().numel() * bucket.buffer().element_size()
            return allreduce_hook(None, bucket)

        ddp.register_comm_hook(comm, counting_hook)
    optimizer = torch.optim.AdamW(params, lr=g.lr, betas=(0.9, 0.999), weight_decay=g.weight_decay)
    warm = g.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    history: list[dict[str, Any]] = []
    first = 0
    if resume is not None:
        state = ckpt.load_trainer_state(resume)
        ckpt.load_optimizer_and_scheduler(resume, optimizer, scheduler, info.device)
        ckpt.load_rng(resume, info.rank)
        first, history = state["step"], state["metrics"]
        emit("resumed", first)
    settings = _settings(cfg)
    slots = worker_slots(g.prompts_per_step, info.world_size, info.rank)
    trainable_bytes = sum(p.numel() * p.element_size() for p in params)
    wall0 = time.perf_counter()
    for step in range(first, g.steps):
        t0 = time.perf_counter()
        comm.update(grad=0, aux=0)
        batch = collect(model, tok, train, slots, step, g.prompts_per_step, settings)
        if ref_model is not None:
            with torch.no_grad():
                batch.ref_logp = token_logprobs(
                    ref_model, batch.input_ids, batch.attention_mask, batch.prompt_width, g.temperature
                )[0].cpu()
        sums = _batch_sums(batch)
        t1 = time.perf_counter()
        grad_norm = _update(ddp, batch, optimizer, params, cfg, info, sums, comm)
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        metrics = _step_metrics(sums, step + 1, info, comm)
        step_s = time.perf_counter() - t0
        metrics.update(
            grad_norm=grad_norm, lr=lr, step_s=step_s, gen_s=batch.gen_s, train_s=time.perf_counter() - t1,
            tokens_per_s=metrics["gen_tokens"] / step_s, bytes_allreduced=comm["grad"], aux_bytes=comm["aux"],
            trainable_bytes=trainable_bytes,
        )  # fmt: skip
        done = step + 1
        if info.rank == 0 and g.eval_every and (done % g.eval_every == 0 or done == g.steps) and eval_problems:
            gen = TransformersGenerator(model, tok, cfg.sampling.batch_size)
            metrics["eval_greedy"] = greedy_accuracy(gen, eval_problems, settings.max_new_tokens, cfg.eval.reward)
        history.append(metrics)
        emit("metrics", metrics)
        if not math.isfinite(metrics["loss"]):
            raise FloatingPointError(f"non-finite loss at step {done}: {metrics}")
        if checkpoint_dir is not None and ((g.checkpoint_every and done % g.checkpoint_every == 0) or done == g.steps):
            state = {"step": done, "world_size": info.world_size, "metrics": history}
            _save_checkpoint(Path(checkpoint_dir), done, info, model, cfg, optimizer, scheduler, state, emit)
    if info.rank == 0:
        adapter = out_dir / "adapter"
        tmp = out_dir / ".tmp-adapter"
        if tmp.exists():
            shutil.rmtree(tmp)
        save_adapter(model, tmp, tok)
        if adapter.exists():
            shutil.rmtree(adapter)
        tmp.rename(adapter)
        emit(
            "done",
            {
                "steps": g.steps,
                "wall_s": time.perf_counter() - wall0,
                "bytes_per_update": history[-1]["bytes_allreduced"] if history else 0,
                "resumed_from": first if resume is not None else None,
                "metrics": history,
            },
        )


def train_grpo(
    cfg: PipelineConfig,
    splits: Splits,
    sft_adapter: Path,
    out_dir: Path,
    checkpoint_dir: Path | None = None,
    on_metrics: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[Path], None] | None = None,
) -> TrainResult:
    """Train GRPO / DAPO / CISPO (+ focal weight) from the SFT adapter; adapter written to out_dir/"adapter".

    workers == 1 runs the loop in this process (no Ray, world size 1: nothing is all-reduced); workers > 1 (or
    `ray_for_single_worker`) runs the same loop on Ray Train workers with DDP. With checkpoint_dir, training
    resumes from its latest complete checkpoint and checkpoints every `checkpoint_every` steps and at the end.
    For parameters=full, out_dir/"adapter" holds a full HF checkpoint instead of a LoRA adapter.
    """
    # absolute paths: Ray workers run in their own working directories
    out_dir, sft_adapter = Path(out_dir).resolve(), Path(sft_adapter).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir).resolve()
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    box: dict[str, Any] = {"metrics": [], "starts": []}

    def emit(kind: str, payload: Any) -> None:
        if kind == "metrics":
            box["metrics"].append(payload)
            if on_metrics is not None:
                on_metrics(payload)
        elif kind == "checkpoint" and on_checkpoint is not None:
            on_checkpoint(Path(payload))
        elif kind == "resumed":
            log.info("resumed from step %d", payload)
        elif kind == "worker":  # a Ray Train worker started (again, after a restart): rank, node
            box["starts"].append(payload)
            log.info("GRPO rank %d of %d on node %s", payload["rank"], payload["world_size"], payload["node"][:8])
        elif kind == "done":
            box["done"] = payload

    start = time.perf_counter()
    if cfg.grpo.workers == 1 and not cfg.grpo.ray_for_single_worker:
        info = WorkerInfo(0, 1, resolve_device(cfg.grpo.device))
        run_worker(cfg, splits.train, splits.eval, Path(sft_adapter), out_dir, checkpoint_dir, info, emit)
    else:
        from essaflow.grpo.distributed import run_on_ray

        run_on_ray(cfg, splits, Path(sft_adapter), out_dir, checkpoint_dir, emit)
    done = box["done"]
    return TrainResult(
        adapter_dir=out_dir / "adapter",
        steps=done["steps"],
        wall_s=round(time.perf_counter() - start, 3),
        bytes_per_update=done["bytes_per_update"],
        metrics=done["metrics"],  # includes the steps before a resume (kept in the checkpoint)
        resumed_from=done["resumed_from"],
        work_by_node=dict(Counter(s["node"][:8] for s in box["starts"]).most_common()),
        worker_failures=max(0, sum(1 for s in box["starts"] if s["rank"] == 0) - 1),  # group restarts
    )


__all__ = ["WorkerInfo", "build_policy", "run_worker", "train_grpo"]
