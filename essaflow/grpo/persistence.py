"""What a GRPO worker writes and reads back: the trained policy, once, in the form training held it (a peft adapter
from DDP ranks or from FSDP shards' gathered factors, or one full Hugging Face checkpoint gathered from the ranks),
and its checkpoints (every rank its RNG and, fsdp, its shard; rank 0 the rest and the commit). The file layout and
its atomic commit are `checkpoint.py`'s.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from essaflow.config import PipelineConfig, changed_trajectory, section_trajectory
from essaflow.grpo import checkpoint as ckpt
from essaflow.grpo.learner import Learner
from essaflow.model.loading import save_adapter_atomic
from essaflow.storage.atomic_dir import atomic_dir


def output_name(parameters: str) -> str:
    """The result's directory name in out_dir: "adapter" (a peft LoRA adapter) or "model" (parameters=full)."""
    return "model" if parameters == "full" else "adapter"


def save_output(learner: Learner, out: Path) -> None:
    """The trained policy, once: a peft adapter or (full) one Hugging Face checkpoint gathered from the ranks."""
    model, tokenizer, rank = learner.model, learner.tokenizer, learner.info.rank
    if learner.dp.sharding == "ddp":
        if rank == 0:
            save_adapter_atomic(model, out, tokenizer)
        return
    if learner.cfg.grpo.parameters == "lora":  # the factors gathered from the shards; the base is not ours to save
        factors = learner.dp.trainable_weights()
        if rank == 0:
            save_adapter_atomic(model, out, tokenizer, state_dict=factors)
        return
    weights = learner.dp.full_state_dict()  # every rank takes part; rank 0 receives the whole policy
    if rank != 0:
        return
    dtype = getattr(torch, learner.cfg.model.dtype)
    tied = getattr(model, "all_tied_weights_keys", None) or {}  # e.g. lm_head = embed_tokens: stored once
    weights = {k: v.to(dtype) for k, v in weights.items() if k not in tied}
    with atomic_dir(out) as tmp:  # in model.dtype, as a full checkpoint is published
        model.config.dtype = dtype
        model.save_pretrained(tmp, state_dict=weights)
        tokenizer.save_pretrained(tmp)


def save_checkpoint(learner: Learner, root: Path, done: int, state: dict[str, Any]) -> Path | None:
    """All ranks save their RNG (and, fsdp, their shard); rank 0 the rest and commits. Rank 0 gets the path."""
    rank, sharded = learner.info.rank, learner.dp.sharding == "fsdp"
    stage = ckpt.step_staging_dir(root, done)
    if rank == 0:
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
    learner.barrier()
    ckpt.save_rng(stage, rank)
    state = {**state, "sharding": learner.dp.sharding}
    if sharded:
        ckpt.save_sharded(stage, learner.model, learner.optimizer)
    learner.barrier()
    if rank != 0:
        return None
    if sharded:
        ckpt.save_scheduler_and_state(stage, learner.scheduler, state)
    else:
        parameters = learner.cfg.grpo.parameters
        ckpt.save_training_state(stage, learner.model, parameters, learner.optimizer, learner.scheduler, state)
    return ckpt.commit(stage, root, done)


def restore_training_state(learner: Learner, resume: Path) -> tuple[int, list[dict[str, Any]]]:
    """Optimiser, scheduler and RNG from a checkpoint (the weights came with the policy); (step, history)."""
    state = ckpt.load_trainer_state(resume)
    check_trajectory(learner.cfg, state, resume)
    if ckpt.is_sharded(resume):
        ckpt.load_sharded(resume, learner.model, learner.optimizer)
        ckpt.load_scheduler(resume, learner.scheduler)
    elif learner.dp.sharding == "fsdp":
        raise ValueError(
            f"checkpoint {resume} holds DDP replicas (grpo.sharding=ddp): resume it with --set grpo.sharding=ddp"
        )
    else:
        ckpt.load_optimizer_and_scheduler(resume, learner.optimizer, learner.scheduler, learner.info.device)
    ckpt.load_rng(resume, learner.info.rank)
    return state["step"], state["metrics"]


def check_trajectory(cfg: PipelineConfig, state: dict[str, Any], resume: Path) -> None:
    """Refuse a checkpoint written under other trajectory settings: resuming it would not replay the run."""
    changed = changed_trajectory(state.get("trajectory", {}), section_trajectory(cfg, "grpo"))
    if changed:
        raise ValueError(
            f"checkpoint {resume} was written with different settings ({', '.join(changed)}); resuming would "
            "not replay the run. Use a fresh checkpoint directory or restore the settings."
        )
