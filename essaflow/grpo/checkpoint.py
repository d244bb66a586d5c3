"""Atomic training checkpoints and exact resume for the GRPO trainer.

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
from pathlib import Path
from typing import Any

import torch

from essaflow.storage.atomic_dir import commit_dir, remove_dir
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
    target = stage / ("adapter" if parameters == "lora" else "model")
    model.save_pretrained(target, safe_serialization=True)
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
