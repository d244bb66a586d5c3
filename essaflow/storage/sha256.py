"""SHA-256 digests: of bytes, of a file (streamed), of a directory's file table, of a config.

The one place that hashes content; manifests (essaflow.storage.manifest), checkpoints, caches and the artifact store all
use it, so an artifact's digest means the same thing wherever it is computed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CHUNK = 1024 * 1024
SHORT = 16  # hex digits of a directory or config digest (names folders, cache keys)


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of the file at ``path``, read in 1 MiB chunks (never whole into memory)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def file_table(directory: Path, *, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """{relative posix path: {"sha256", "size"}} of every regular file under ``directory``, sorted.

    ``exclude`` names top-level files left out (a directory's own manifest is not part of its content).
    """
    directory = Path(directory)
    table = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and rel not in exclude:
            sha, size = sha256_file(p)
            table[rel] = {"sha256": sha, "size": size}
    return table


def table_digest(files: dict[str, dict[str, Any]]) -> str:
    """A directory's content digest: the hash of its (path -> sha256, size) table (what AdapterRef.digest holds)."""
    return sha256_bytes(json.dumps(files, sort_keys=True).encode())[:SHORT]


def config_hash(model: Any) -> str:
    """Short hash of a pydantic model's JSON (task cache keys)."""
    return sha256_bytes(model.model_dump_json().encode())[:SHORT]
