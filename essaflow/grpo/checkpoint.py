"""Atomic training checkpoints and exact resume for the GRPO trainer.

Layout of `checkpoint_dir/<step>/` (step = rollout steps completed):

    adapter/ or model/        peft adapter (LoRA) or full HF checkpoint, safetensors
    optimizer.pt              AdamW state_dict          (torch.save; read back with weights_only=True)
    scheduler.pt              LR scheduler state_dict   (same)
    rng_rank<r>.pt            python / torch / cuda RNG states of every worker (same)
    trainer_state.json        step, world size, metrics so far
    checkpoint_manifest.json  sha256 + size of every file above, written LAST

Everything is written into `checkpoint_dir/.tmp-<step>/` and renamed into place, so a checkpoint either exists
completely or not at all; `latest_checkpoint` also re-verifies the manifest (it protects copies made without a
rename, e.g. uploads). The manifest is not called `manifest.json` because essaflow.storage reserves that name for
its own upload manifest. Nothing read back executes code: safetensors, JSON, and `torch.load(weights_only=True)`.

In multi-worker runs checkpoint_dir must be visible to every worker (one machine, or a shared file system).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

MANIFEST = "checkpoint_manifest.json"
KEEP_LAST = 3  # older complete checkpoints are pruned after a new one is committed


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def staging_dir(root: Path, step: int) -> Path:
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
    torch.save(scheduler.state_dict(), stage / "scheduler.pt")
    (stage / "trainer_state.json").write_text(json.dumps(state))


def commit(stage: Path, root: Path, step: int) -> Path:
    """Write the manifest last, rename the staging directory to root/<step>, prune old checkpoints."""
    files = {
        str(p.relative_to(stage)): {"sha256": _sha256(p), "size": p.stat().st_size}
        for p in sorted(stage.rglob("*"))
        if p.is_file()
    }
    (stage / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
    final = Path(root) / str(step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(stage, final)
    for old in complete_checkpoints(root)[:-KEEP_LAST]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def verify(path: Path) -> bool:
    """True when the manifest exists and every listed file matches its size and sha256."""
    manifest = path / MANIFEST
    if not manifest.exists():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
        return all(
            (path / rel).is_file()
            and (path / rel).stat().st_size == meta["size"]
            and _sha256(path / rel) == meta["sha256"]
            for rel, meta in files.items()
        )
    except (ValueError, KeyError, OSError):
        return False


def complete_checkpoints(root: Path | None) -> list[Path]:
    """Committed checkpoints (a manifest present), oldest first."""
    if root is None or not Path(root).is_dir():
        return []
    found = [p for p in Path(root).iterdir() if p.is_dir() and p.name.isdigit() and (p / MANIFEST).exists()]
    return sorted(found, key=lambda p: int(p.name))


def latest_checkpoint(root: Path | None) -> Path | None:
    """The newest checkpoint whose manifest verifies (a corrupt newest one falls back to the one before)."""
    for path in reversed(complete_checkpoints(root)):
        if verify(path):
            return path
    return None


def load_trainer_state(path: Path) -> dict[str, Any]:
    return json.loads((path / "trainer_state.json").read_text())


def load_optimizer_and_scheduler(
    path: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    map_location: str | torch.device = "cpu",
) -> None:
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=map_location, weights_only=True))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))


def load_rng(path: Path, rank: int) -> bool:
    """Restore this worker's RNG states; False when the checkpoint came from fewer workers (then left as is)."""
    f = path / f"rng_rank{rank}.pt"
    if not f.exists():
        return False
    set_rng_state(torch.load(f, weights_only=True))
    return True
