"""The source's content as a short digest: what the dataset cache key hashes besides the data config.

A key of the config alone (the path) would serve a data file changed in place from the cache; with the digest,
changed bytes are a new key, always, and unchanged bytes hit the cache:

- file, or a local HF dataset directory: the SHA-256 of the bytes (essaflow.storage.content_digest: remembered per file
  stat, so an unchanged file costs a stat);
- s3://: the object's ETag and size (one listing, nothing downloaded);
- a hub dataset: the commit data.hf_revision resolves to (a repo at a commit is immutable);
- synthetic: nothing beyond the config (the generator is a pure function of it).
"""

from __future__ import annotations

import json
from pathlib import Path

from essaflow.data.config import DataConfig
from essaflow.storage.content_digest import path_digest
from essaflow.storage.digest import sha256_bytes

#: How records are read and validated; bump it when that changes what a source yields (2: answers as written).
READER_VERSION = 2


def source_fingerprint(cfg: DataConfig) -> str:
    """Short digest of the bytes the source would yield now (``absent`` for a missing local path)."""
    if cfg.source == "synthetic":
        return "synthetic"
    assert cfg.path
    if cfg.source == "s3":
        return _digest(_s3_versions(cfg.path))
    local = Path(cfg.path).expanduser()
    if cfg.source == "file" or local.exists():
        return path_digest(local) if local.exists() else "absent"
    from essaflow.storage.hub import hub_commit

    return hub_commit(cfg.path, cfg.hf_revision, repo_type="dataset", field="data.path")


def _s3_versions(uri: str) -> dict[str, str]:
    from essaflow.storage import open_store

    parent, _, name = uri.rstrip("/").rpartition("/")
    return open_store(parent).versions(name)


def _digest(obj: object) -> str:
    return sha256_bytes(json.dumps(obj, sort_keys=True).encode())[:16]
