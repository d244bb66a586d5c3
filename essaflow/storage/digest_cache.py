"""Content digests of local files and directories, remembered so a large checkpoint is hashed once.

Cache keys (the dataset a source yields, the SFT adapter a base model yields) must follow the bytes, not the path:
a file rewritten in place is new content. Hashing a 15 GB checkpoint on every run is too slow, so each file's
SHA-256 is remembered in a small JSON memo under the cache directory, keyed by its absolute path and its stat
(size, mtime, ctime, inode). Any write changes mtime and ctime; `cp -p` / `rsync -a` restore mtime but not ctime
(the kernel sets it), and a file replaced by rename gets a new inode, so changed bytes always miss the memo and are
rehashed. An unchanged file costs one stat. A file changed in the last 2 s is hashed every time and remembered
only once it has settled (file times tick coarsely; git's "racily clean" rule, see RACY_NS).

The memo is written atomically (temporary sibling, then rename); two processes racing lose at worst an entry,
which costs a rehash, never a wrong digest.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from essaflow.storage.cache_dir import cache_root
from essaflow.storage.sha256 import sha256_file, table_digest

log = logging.getLogger(__name__)

MEMO_NAME = "content-digests.json"
MEMO_FORMAT = 1
MAX_ENTRIES = 50_000  # a few KB per hundred files; oldest entries go first beyond this
# File times tick coarsely (a jiffy, or worse on some file systems): a file rewritten within the same tick as the
# stat we remembered would look unchanged. Like git's "racily clean" rule, a file changed this recently is hashed
# every time and remembered only once it has settled.
RACY_NS = 2_000_000_000


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def memo_path() -> Path:
    return cache_root() / MEMO_NAME


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):  # an unreadable memo is an empty one: everything is rehashed, nothing is wrong
        log.warning("ignoring unreadable digest memo %s", path)
        return {}
    if not isinstance(data, dict) or data.get("format") != MEMO_FORMAT or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def _save(path: Path, files: dict[str, Any]) -> None:
    if len(files) > MAX_ENTRIES:  # dicts keep insertion order: drop the oldest
        files = dict(list(files.items())[-MAX_ENTRIES:])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": MEMO_FORMAT, "files": files}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _digests(paths: list[Path]) -> list[tuple[str, int]]:
    """(sha256, size) of each file, from the memo where the file's stat is unchanged, else hashed and remembered."""
    where = memo_path()
    files = _load(where)
    out, changed = [], False
    for p in paths:
        p = p.resolve()
        st = p.stat()
        key, stat = str(p), _stat_key(st)
        entry = files.get(key)
        if isinstance(entry, dict) and entry.get("stat") == stat and isinstance(entry.get("sha256"), str):
            out.append((entry["sha256"], st.st_size))
            continue
        sha, size = sha256_file(p)
        settled = time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS
        if settled and _stat_key(p.stat()) == stat:  # not remembered if it changed while we read it
            files.pop(key, None)
            files[key] = {"stat": stat, "sha256": sha}
            changed = True
        out.append((sha, size))
    if changed:
        try:
            _save(where, files)
        except OSError as e:  # a read-only cache costs speed, not correctness
            log.warning("cannot write digest memo %s: %s", where, e)
    return out


def file_digest(path: str | Path) -> str:
    """Hex SHA-256 of one file's bytes (remembered per stat)."""
    return _digests([Path(path)])[0][0]


def tree_digest(directory: str | Path) -> str:
    """Digest of a directory's content: every regular file's relative path, SHA-256 and size.

    Hidden entries (a name starting with '.', e.g. `.cache/huggingface/` that `huggingface-cli download` writes, or
    `.git/`) are left out: they describe a download, not the weights.
    """
    root = Path(directory)
    paths = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    digests = _digests(paths)
    table = {p.relative_to(root).as_posix(): {"sha256": d, "size": s} for p, (d, s) in zip(paths, digests)}
    return table_digest(table)


def path_digest(path: str | Path) -> str:
    """`file_digest` of a file, `tree_digest` of a directory."""
    p = Path(path)
    return tree_digest(p) if p.is_dir() else file_digest(p)[:16]
