"""A trainer's local checkpoints: numbered directories (step or generation) under one root, each committed by
`atomic_dir` (manifest last). ESSA's and GRPO's checkpoint modules both find their newest one here."""

from __future__ import annotations

from pathlib import Path

from essaflow.storage.atomic_dir import committed_manifest, recover_children
from essaflow.storage.manifest import MANIFEST


def committed_checkpoints(root: Path | None) -> list[Path]:
    """The numbered directories under root with a manifest (committed), oldest first; a directory whose rewrite
    crashed mid-swap is recovered first."""
    if root is None or not Path(root).is_dir():
        return []
    recover_children(root)
    found = [p for p in Path(root).iterdir() if p.is_dir() and p.name.isdigit() and (p / MANIFEST).exists()]
    return sorted(found, key=lambda p: int(p.name))


def latest_checkpoint(root: Path | None, format: int | None = None) -> Path | None:
    """The newest committed checkpoint under root whose manifest verifies (every file's size and sha256) and, when
    `format` is given, records that format; a corrupt newest one falls back to the one before. None: there is none."""
    for path in reversed(committed_checkpoints(root)):
        manifest = committed_manifest(path)
        if manifest is not None and (format is None or manifest.get("format") == format):
            return path
    return None
