"""A run's trainer checkpoints in storage: synced as written, and the newest committed one restored on retry."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from essaflow.refs import RunRef
from essaflow.storage import MANIFEST, ArtifactStore
from essaflow.storage.atomic_dir import install_dir

CHECKPOINT_DATA = "data"  # runs/<run_id>/checkpoints/<step>/data/ holds the trainer's own files


def checkpoint_prefix(run: RunRef) -> str:
    return f"{run.run_prefix}/checkpoints"


def latest_stored_checkpoint(store: ArtifactStore, run: RunRef) -> str | None:
    """Name of the newest committed checkpoint (manifest present) of this run, or None."""
    root = checkpoint_prefix(run)
    rel = [k[len(root) + 1 :].split("/") for k in store.list(root)]
    committed = {parts[0] for parts in rel if len(parts) == 2 and parts[1] == MANIFEST}
    if not committed:
        return None
    return max(committed, key=lambda c: (int(c) if c.isdigit() else -1, c))


def restore_checkpoint(store: ArtifactStore, run: RunRef, local_root: Path) -> str | None:
    """Download the newest committed checkpoint into local_root/<step>/ (verified); returns its name."""
    name = latest_stored_checkpoint(store, run)
    if name is not None:
        with tempfile.TemporaryDirectory(dir=_mkdir(local_root), prefix=".restore-") as tmp:
            store.download_dir(f"{checkpoint_prefix(run)}/{name}", Path(tmp) / "ckpt")
            # download_dir fsynced it; an existing local copy of that step is replaced only once this one is in
            install_dir(Path(tmp) / "ckpt" / CHECKPOINT_DATA, Path(local_root) / name)
    return name


def sync_checkpoint(store: ArtifactStore, run: RunRef, local_ckpt: Path) -> str:
    """Upload one checkpoint directory written by a trainer; returns its URI.

    The trainer's files go under `data/` (a trainer may keep its own manifest.json at its top level), hard-linked
    into a staging directory rather than copied.
    """
    local_ckpt = Path(local_ckpt)
    prefix = f"{checkpoint_prefix(run)}/{local_ckpt.name}"
    with tempfile.TemporaryDirectory(dir=local_ckpt.parent, prefix=".sync-") as tmp:
        shutil.copytree(local_ckpt, Path(tmp) / CHECKPOINT_DATA, copy_function=_link_or_copy)
        store.upload_dir(Path(tmp), prefix, overwrite=True)  # a retried attempt may rewrite a step
    return store.url(prefix)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _mkdir(path: Path) -> Path:
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)
