"""The source's content as a short digest: what the dataset cache key hashes besides the data config.

A key of the config alone (the path) would serve a data file changed in place from the cache; with the digest,
changed bytes are a new key, always, and unchanged bytes hit the cache:

- file (one, a directory or a glob of shards): the SHA-256 of each file's bytes (essaflow.storage.digest_cache:
  remembered per file stat, so an unchanged file costs a stat), digested with the file names (essaflow.data.shards);
- s3:// (an object, a prefix or a glob): each object's ETag and size (one listing, nothing downloaded);
- a local HF dataset directory: the SHA-256 of its files;
- a hub dataset: the commit data.hf_revision resolves to (a repo at a commit is immutable);
- synthetic: its task's generator settings (the generator is a pure function of them);
- reasoning_gym: its tasks, their config keys, size and seed, and the installed reasoning-gym's version;
- humaneval: the SHA-256 of the package's problem file.
"""

from __future__ import annotations

from pathlib import Path

from essaflow.data.config import DataConfig, HeldOutSourceConfig
from essaflow.data.shards import digest_of, is_glob, local_snapshot, s3_snapshot
from essaflow.storage.digest_cache import path_digest

#: How records are read and validated; bump it when that changes what a source yields (2: answers as written;
#: 3: shards, what follows "####" read whole).
READER_VERSION = 3


def source_fingerprint(cfg: DataConfig) -> str:
    """Short digest of the bytes the source would yield now (``absent`` for a missing local path)."""
    if cfg.source == "synthetic":
        return digest_of({"synthetic": cfg.synthetic.generator_settings(), "seed": cfg.seed})
    if cfg.source == "reasoning_gym":  # a pure function of its settings, the seed and the generator's version
        settings = cfg.reasoning_gym.model_dump(mode="json")
        return digest_of({"reasoning_gym": settings, "seed": cfg.seed, "version": _version("reasoning-gym")})
    if cfg.source == "humaneval":
        from essaflow.data.humaneval import problems_file

        return path_digest(problems_file())
    assert cfg.path
    if cfg.source == "s3":
        return s3_snapshot(cfg.path).digest
    local = Path(cfg.path).expanduser()
    if cfg.source == "file":
        return local_snapshot(cfg.path).digest if is_glob(cfg.path) or local.exists() else "absent"
    if local.exists():
        return path_digest(local)
    from essaflow.storage.hub import hub_commit

    return hub_commit(cfg.path, cfg.hf_revision, repo_type="dataset", field="data.path")


def data_snapshot_digest(data: DataConfig, held_out: HeldOutSourceConfig | None = None) -> str:
    """One digest of everything a run's data reads now: the training source and the held-out source (eval.data).

    The same digest the run records (`DatasetRef.snapshot["digest"]`, the MLflow tag `essaflow.data_snapshot`, the
    JSON line's `data.snapshot`), so a scheduler can compare it with the last run's and skip a run on the same data.
    Listing only, nothing downloaded."""
    parts = [source_fingerprint(data)]
    if held_out is not None:
        parts.append(source_fingerprint(data.held_out(held_out)))
    return combined_digest(parts)


def combined_digest(parts: list[str]) -> str:
    """The snapshot digest from its sources' digests (one source: its own digest)."""
    return parts[0] if len(parts) == 1 else digest_of(parts)


def _version(distribution: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
