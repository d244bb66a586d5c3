"""The one manifest format: ``manifest.json`` inside a directory, written last, naming every other file.

    {"files": {"<relative posix path>": {"sha256": "<hex>", "size": <bytes>}, ...}, <metadata>...}

A local directory (checkpoint, cache, adapter) and a directory artifact in storage carry the same format, so a
local directory uploads with the identical manifest and digest. A directory without a valid manifest is
incomplete; one whose files do not match it is corrupt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from essaflow.storage.sha256 import file_table, sha256_file, table_digest

MANIFEST = "manifest.json"


def build_manifest(directory: Path, **meta: Any) -> dict[str, Any]:
    """The manifest of ``directory`` as it is now (its own manifest.json left out), plus ``meta`` keys."""
    return {**meta, "files": file_table(Path(directory), exclude=(MANIFEST,))}


def write_manifest(directory: Path, manifest: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """Write ``manifest`` (built from the files when None) as ``directory/manifest.json``, fsynced; returns it."""
    manifest = build_manifest(directory, **meta) if manifest is None else {**manifest, **meta}
    path = Path(directory) / MANIFEST
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    return manifest


def _safe_rel(rel: Any) -> bool:
    # A manifest is data read back from disk: it must not name a path outside its directory.
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return False
    p = PurePosixPath(rel)
    return not p.is_absolute() and all(part not in ("", ".", "..") for part in rel.split("/")) and rel != MANIFEST


def well_formed(manifest: Any) -> bool:
    """True when ``manifest`` has a "files" table of safe relative paths, each with sha256 and size."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return isinstance(files, dict) and all(
        _safe_rel(rel) and isinstance(m, dict) and isinstance(m.get("sha256"), str) and isinstance(m.get("size"), int)
        for rel, m in files.items()
    )


def read_manifest(directory: Path, name: str = MANIFEST) -> dict[str, Any] | None:
    """The well-formed manifest of ``directory`` (not checked against the files), or None."""
    try:
        manifest = json.loads((Path(directory) / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if well_formed(manifest) else None


def verify_manifest(directory: Path, name: str = MANIFEST) -> dict[str, Any] | None:
    """The manifest when every file it lists exists with its size and SHA-256; None if missing or corrupt."""
    directory = Path(directory)
    manifest = read_manifest(directory, name)
    if manifest is None:
        return None
    for rel, meta in manifest["files"].items():
        path = directory / rel
        try:
            if not path.is_file() or path.stat().st_size != meta["size"] or sha256_file(path)[0] != meta["sha256"]:
                return None
        except OSError:
            return None
    return manifest


def manifest_digest(manifest: dict[str, Any]) -> str:
    """A directory's content digest from its manifest (the hash of its file table)."""
    return table_digest(manifest["files"])


def local_digest(directory: Path) -> str:
    """The digest of a local directory's content (its own manifest.json left out), as storage would report it."""
    return table_digest(file_table(Path(directory), exclude=(MANIFEST,)))
