"""The local cache directory (`ESSAFLOW_CACHE_DIR`, default ~/.cache/essaflow): built models, SFT adapters, digests."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("ESSAFLOW_CACHE_DIR", Path.home() / ".cache" / "essaflow"))
