"""What a GRPO worker saves and restores, and how: the trained policy, once, in the form training held it (a peft
adapter from DDP ranks or from FSDP shards' gathered factors, or one full Hugging Face checkpoint gathered from the
ranks: `save_output`), and atomic training checkpoints with exact resume (`save_checkpoint`,
`restore_training_state`: every rank its RNG and, fsdp, its shard; rank 0 the rest and the commit).

Layout of `checkpoint_dir/<step>/` (step = rollout steps completed):

    adapter/ or model/        peft adapter (LoRA) or full HF checkpoint, safetensors (grpo.sharding=ddp)
    optimizer.pt              AdamW state_dict          (torch.save; read back with weights_only=True; ddp)
    shards/                   grpo.sharding=fsdp instead of the two above: torch.distributed.checkpoint of the
                              float32 weights and AdamW state, one __<rank>_0.distcp per rank and .metadata (the
                              coordinator's, written after every rank's shard); it loads at any world size
    scheduler.pt              LR scheduler state_dict   (same)
    rng_rank<r>.pt            python / torch / cuda RNG states of every worker (same)
    trainer_state.json        step, world size, metrics so far
    manifest.json             sha256 + size of every file above, written LAST (essaflow.storage.manifest)

Every worker writes into `checkpoint_dir/.tmp-<step>/` (a name all ranks know); rank 0 commits it with
`storage.atomic_dir` (manifest last, fsync, swap in, an existing copy of that step kept until the new one is in),
so a checkpoint either exists completely or not at all; `essaflow.storage.checkpoint_dirs.latest_checkpoint` also
re-verifies the manifest (it protects copies made without a rename, e.g. uploads). Nothing read back executes code:
safetensors, JSON, and `torch.load(weights_only=True)`.

With fsdp every rank writes its own shard into the staging directory; a rank that dies mid-save leaves it
uncommitted, so the previous checkpoint stays the newest complete one.

In multi-worker runs checkpoint_dir must be visible to every worker (one machine, or a shared file system).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from essaflow.config import PipelineConfig, changed_trajectory, section_trajectory
from essaflow.grpo.learner import Learner
from essaflow.model.loading import embedding_layers_to_save, save_adapter_atomic
from essaflow.storage.atomic_dir import atomic_dir, commit_dir, remove_dir
from essaflow.storage.checkpoint_dirs import committed_checkpoints

SHARDS = "shards"
KEEP_LAST = 3  # older complete checkpoints are pruned after a new one is committed


def step_staging_dir(root: Path, step: int) -> Path:
    """Where every rank writes its part of checkpoint `step` before rank 0 commits it: a name all ranks know."""
    return Path(root) / f".tmp-{step}"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng(stage: Path, rank: int) -> None:
    torch.save(rng_state(), stage / f"rng_rank{rank}.pt")


def save_training_state(
    stage: Path,
    model: torch.nn.Module,
    parameters: str,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: dict[str, Any],
) -> None:
    """Weights, optimizer, scheduler and trainer state into the staging directory (rank 0)."""
    if parameters == "lora":  # a peft adapter (embedding_layers_to_save: without peft's look for the base's config)
        embeddings = embedding_layers_to_save(model)
        model.save_pretrained(stage / "adapter", safe_serialization=True, save_embedding_layers=embeddings)
    else:
        model.save_pretrained(stage / "model", safe_serialization=True)
    torch.save(optimizer.state_dict(), stage / "optimizer.pt")
    save_scheduler_and_state(stage, scheduler, state)


def is_sharded(path: Path) -> bool:
    """True for a checkpoint written by fsdp ranks (torch.distributed.checkpoint shards)."""
    return (Path(path) / SHARDS).is_dir()


def _dcp_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optim = get_state_dict(model, optimizer)
    return {"model": weights, "optim": optim}


def save_sharded(stage: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shard of the weights and AdamW state (a collective; rank 0 writes .metadata last)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_dcp_state(model, optimizer), checkpoint_id=str(Path(stage) / SHARDS))


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Weights and AdamW state from the shards, resharded to this run's ranks (any world size, fsdp or not)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _dcp_state(model, optimizer)
    dcp.load(state, checkpoint_id=str(Path(path) / SHARDS))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def save_scheduler_and_state(stage: Path, scheduler: Any, state: dict[str, Any]) -> None:
    """The LR schedule and the trainer state (rank 0), beside the shards."""
    torch.save(scheduler.state_dict(), stage / "scheduler.pt")
    (stage / "trainer_state.json").write_text(json.dumps(state))


def commit(stage: Path, root: Path, step: int) -> Path:
    """Write the manifest last, fsync, swap the staging directory in as root/<step>, prune old checkpoints."""
    final = Path(root) / str(step)
    commit_dir(stage, final, step=step)
    for old in committed_checkpoints(root)[:-KEEP_LAST]:
        remove_dir(old)
    return final


def load_trainer_state(path: Path) -> dict[str, Any]:
    return json.loads((path / "trainer_state.json").read_text())


def load_optimizer_and_scheduler(
    path: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    map_location: str | torch.device = "cpu",
) -> None:
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=map_location, weights_only=True))
    load_scheduler(path, scheduler)


def load_scheduler(path: Path, scheduler: Any) -> None:
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))


def load_rng(path: Path, rank: int) -> bool:
    """Restore this worker's RNG states; False when the checkpoint came from fewer workers (then left as is)."""
    f = path / f"rng_rank{rank}.pt"
    if not f.exists():
        return False
    set_rng_state(torch.load(f, weights_only=True))
    return True


# ---------------------------------------------------------------- what a worker saves and restores


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
    stage = step_staging_dir(root, done)
    if rank == 0:
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
    learner.barrier()
    save_rng(stage, rank)
    state = {**state, "sharding": learner.dp.sharding}
    if sharded:
        save_sharded(stage, learner.model, learner.optimizer)
    learner.barrier()
    if rank != 0:
        return None
    if sharded:
        save_scheduler_and_state(stage, learner.scheduler, state)
    else:
        parameters = learner.cfg.grpo.parameters
        save_training_state(stage, learner.model, parameters, learner.optimizer, learner.scheduler, state)
    return commit(stage, root, done)


def restore_training_state(learner: Learner, resume: Path) -> tuple[int, list[dict[str, Any]]]:
    """Optimiser, scheduler and RNG from a checkpoint (the weights came with the policy); (step, history)."""
    state = load_trainer_state(resume)
    check_trajectory(learner.cfg, state, resume)
    if is_sharded(resume):
        load_sharded(resume, learner.model, learner.optimizer)
        load_scheduler(resume, learner.scheduler)
    elif learner.dp.sharding == "fsdp":
        raise ValueError(
            f"checkpoint {resume} holds DDP replicas (grpo.sharding=ddp): resume it with --set grpo.sharding=ddp"
        )
    else:
        load_optimizer_and_scheduler(resume, learner.optimizer, learner.scheduler, learner.info.device)
    load_rng(resume, learner.info.rank)
    return state["step"], state["metrics"]


def check_trajectory(cfg: PipelineConfig, state: dict[str, Any], resume: Path) -> None:
    """Refuse a checkpoint written under other trajectory settings: resuming it would not replay the run."""
    changed = changed_trajectory(state.get("trajectory", {}), section_trajectory(cfg, "grpo"))
    if changed:
        raise ValueError(
            f"checkpoint {resume} was written with different settings ({', '.join(changed)}); resuming would "
            "not replay the run. Use a fresh checkpoint directory or restore the settings."
        )
