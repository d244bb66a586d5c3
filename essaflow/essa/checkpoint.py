"""ESSA checkpoints: JSON + numpy arrays (never pickle), written atomically, manifest last.

Layout of one checkpoint, `<checkpoint_dir>/<generation, 8 digits>/`:

    <part>.json, <part>.npz   one pair per saved part (strategy, sampler, trainer), arrays loaded allow_pickle=False
    manifest.json             written last: generation, format, sha256 of every other file

The directory is assembled under a hidden temporary name and renamed into place, so a crash leaves either a
complete checkpoint or a `.tmp-*` directory that is ignored (and cleaned at the next write). A checkpoint counts
only if its manifest exists and every checksum matches (ARCHITECTURE.md "Storage layout": nothing read back
executes code).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
MANIFEST = "manifest.json"
Part = tuple[dict[str, Any], dict[str, np.ndarray]]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_checkpoint(checkpoint_dir: Path, generation: int, parts: dict[str, Part]) -> Path:
    """Write parts {name: (json_dict, arrays)} as checkpoint `generation`; returns its directory."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for stale in checkpoint_dir.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=checkpoint_dir, prefix=f".tmp-{generation:08d}-"))
    files = {}
    for name, (meta, arrays) in parts.items():
        (tmp / f"{name}.json").write_text(json.dumps(meta, indent=1))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        (tmp / f"{name}.npz").write_bytes(buf.getvalue())
        files[f"{name}.json"] = _sha256(tmp / f"{name}.json")
        files[f"{name}.npz"] = _sha256(tmp / f"{name}.npz")
    manifest = {"format": FORMAT, "generation": generation, "parts": sorted(parts), "sha256": files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    final = checkpoint_dir / f"{generation:08d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def is_complete(path: Path) -> bool:
    """True when the manifest exists and every listed file matches its checksum."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        return manifest["format"] == FORMAT and all(_sha256(path / f) == h for f, h in manifest["sha256"].items())
    except (OSError, ValueError, KeyError):
        return False


def latest_checkpoint(checkpoint_dir: Path | None) -> Path | None:
    """The complete checkpoint with the highest generation, or None."""
    if checkpoint_dir is None or not checkpoint_dir.is_dir():
        return None
    candidates = sorted((p for p in checkpoint_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for path in reversed(candidates):
        if is_complete(path):
            return path
    return None


def read_checkpoint(path: Path) -> tuple[int, dict[str, Part]]:
    """(generation, parts) of a complete checkpoint."""
    if not is_complete(path):
        raise ValueError(f"checkpoint {path} is incomplete or corrupt")
    manifest = json.loads((path / MANIFEST).read_text())
    parts = {}
    for name in manifest["parts"]:
        meta = json.loads((path / f"{name}.json").read_text())
        with np.load(path / f"{name}.npz", allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        parts[name] = (meta, arrays)
    return int(manifest["generation"]), parts
