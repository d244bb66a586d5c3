"""ESSA checkpoints: what a search saves and restores (`save_search`, `restore_search`), as JSON + numpy arrays (never
pickle), written atomically, manifest last.

Layout of one checkpoint, `<checkpoint_dir>/<generation, 8 digits>/`:

    <part>.json, <part>.npz   one pair per saved part (strategy, sampler, trainer), arrays loaded allow_pickle=False
    manifest.json             written last (essaflow.storage.manifest): sha256 + size of every other file, and
                              format, generation, parts

The directory is written by `essaflow.storage.atomic_dir`: assembled under a hidden temporary name, fsynced and swapped
into place, an existing copy of the same generation kept until the new one is in. A checkpoint counts only if its
manifest exists, every checksum matches and it records FORMAT; the newest such one is
`essaflow.storage.checkpoint_dirs.latest_checkpoint(checkpoint_dir, FORMAT)`. Nothing read back executes code.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from essaflow.config import PipelineConfig, changed_trajectory, section_trajectory
from essaflow.storage.atomic_dir import atomic_dir, committed_manifest
from essaflow.storage.checkpoint_dirs import latest_checkpoint
from essaflow.storage.manifest import MANIFEST

FORMAT = 2
Part = tuple[dict[str, Any], dict[str, np.ndarray]]


def write_checkpoint(checkpoint_dir: Path, generation: int, parts: dict[str, Part]) -> Path:
    """Write parts {name: (json_dict, arrays)} as checkpoint `generation`; returns its directory."""
    final = Path(checkpoint_dir) / f"{generation:08d}"
    with atomic_dir(final, format=FORMAT, generation=generation, parts=sorted(parts)) as tmp:
        for name, (meta, arrays) in parts.items():
            (tmp / f"{name}.json").write_text(json.dumps(meta, indent=1))
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            (tmp / f"{name}.npz").write_bytes(buf.getvalue())
    return final


def is_complete(path: Path) -> bool:
    """True when the manifest exists and every listed file matches its checksum."""
    manifest = committed_manifest(path)
    return manifest is not None and manifest.get("format") == FORMAT


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


def save_search(
    checkpoint_dir: Path, cfg: PipelineConfig, generation: int, dimension: int, strategy, sampler, history: list
) -> Path:
    """What a search saves after `generation`: the strategy and the minibatch sampler (their states), and the
    trainer's part: the search dimension, the trajectory-marked settings it ran under and the metrics rows so far."""
    meta = {
        "generation": generation,
        "dimension": dimension,
        "trajectory": section_trajectory(cfg, "essa"),
        "metrics": history,
    }
    parts = {"strategy": strategy.state_dict(), "sampler": sampler.state_dict(), "trainer": (meta, {})}
    return write_checkpoint(checkpoint_dir, generation, parts)


def restore_search(
    checkpoint_dir: Path | None, cfg: PipelineConfig, strategy, sampler
) -> tuple[Path, int, list] | None:
    """Load the latest complete checkpoint into `strategy` and `sampler`: (its path, generation, metrics rows), or
    None when there is none. One written under other trajectory settings is refused (it would not replay the run)."""
    latest = latest_checkpoint(checkpoint_dir, FORMAT)
    if latest is None:
        return None
    generation, parts = read_checkpoint(latest)
    meta = parts["trainer"][0]
    changed = changed_trajectory(meta["trajectory"], section_trajectory(cfg, "essa"))
    if changed:
        raise ValueError(
            f"checkpoint {latest} was written with different settings ({', '.join(changed)}); resuming "
            "would not replay the run. Use a fresh checkpoint directory or restore the settings."
        )
    strategy.load_state_dict(*parts["strategy"])
    sampler.load_state_dict(*parts["sampler"])
    return latest, generation, meta["metrics"]
