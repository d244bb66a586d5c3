"""The local cache directory (`ESSAFLOW_CACHE_DIR`, default ~/.cache/essaflow): built models, SFT adapters, digests."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("ESSAFLOW_CACHE_DIR", Path.home() / ".cache" / "essaflow"))


def cache_dir_problem() -> str | None:
    """What stops this process from using the cache directory (created if missing, a file written and removed
    there), as one line naming the variable and the fix; None when it works. Checked before a run's compute: the
    run, and its failure hooks (the stage journal lives there), would otherwise each fail on it."""
    root = cache_root()
    given = os.environ.get("ESSAFLOW_CACHE_DIR")
    where = f"ESSAFLOW_CACHE_DIR={given!r}" if given is not None else f"the cache directory {str(root)!r}"
    if root.exists() and not root.is_dir():
        return f"{where} is not a directory: set ESSAFLOW_CACHE_DIR to a writable directory"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as err:
        why = err.strerror or type(err).__name__
        fix = "set ESSAFLOW_CACHE_DIR to a writable directory" + ("" if given is None else ", or unset it")
        return f"{where}: cannot create or write there ({why}): {fix} (built models, SFT adapters, run journals)"
    return None
