"""Which commit a Hugging Face hub revision names: the hub when reachable, else the local HF cache.

Content-keyed caches use the commit, so a branch (`main`) moving forward is new content.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from essaflow.config_base import ConfigError

_COMMIT = re.compile(r"[0-9a-f]{40}")
#: Hub repo ids: `name` or `owner/name`, letters, digits, '-', '_', '.' (no '--' or '..', at most 96 characters).
HUB_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` is spelled like a hub repo id (checked offline; says nothing about existence)."""
    return bool(HUB_ID.fullmatch(name)) and not name.endswith((".", "-"))


def hub_commit(
    repo_id: str,
    revision: str | None,
    *,
    repo_type: Literal["model", "dataset"] = "model",
    field: str = "model.name_or_path",
) -> str:
    """The commit ``revision`` (default: the repo's default branch) names.

    A 40-hex revision is already a commit. Otherwise ask the hub (unless HF_HUB_OFFLINE is set), then fall back to
    the local HF cache (what an offline load reads); neither -> a ConfigError naming ``field``.
    """
    if revision and _COMMIT.fullmatch(revision):
        return revision
    reason = "HF_HUB_OFFLINE is set"
    if not hub_offline():
        try:
            return _hub_resolve(repo_id, revision, repo_type)
        except Exception as e:  # unreachable, unknown repo, gated: try the cache before giving up
            reason = f"{type(e).__name__}: {e}"
    cached = _cached_commit(repo_id, revision, repo_type)
    if cached:
        return cached
    raise ConfigError(
        f"{field} {repo_id!r} is not a local path and its revision {revision or 'default'!r} cannot be resolved: "
        f"not in the local HF cache, and the hub did not answer ({reason}): check the id's spelling, download it "
        f"where the hub answers (huggingface-cli download {repo_id}) into this machine's HF cache, or name a local "
        "directory"
    )


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_resolve(repo_id: str, revision: str | None, repo_type: str) -> str:
    from huggingface_hub import HfApi

    api = HfApi()
    info = api.dataset_info if repo_type == "dataset" else api.model_info
    return info(repo_id, revision=revision, timeout=10).sha


def _cached_commit(repo_id: str, revision: str | None, repo_type: str) -> str | None:
    """The snapshot commit the local HF cache maps ``revision`` to (refs/<revision>), if the repo is cached."""
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    if repo_type == "model":
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
        if isinstance(found, str):  # .../models--org--name/snapshots/<commit>/config.json
            return Path(found).parent.name
        return None
    try:  # datasets have no one file every repo holds: read the ref from the cache's own index
        for repo in scan_cache_dir().repos:
            if repo.repo_id == repo_id and repo.repo_type == repo_type:
                for rev in repo.revisions:
                    if (revision or "main") in rev.refs or rev.commit_hash == revision:
                        return rev.commit_hash
    except Exception:  # no cache directory yet
        return None
    return None
