"""Atomic directory writes: fill a hidden sibling, fsync it, swap it in; at no instant can a crash lose both copies.

    with atomic_dir(final, step=3) as tmp:   # tmp = <parent>/.<name>.tmp-<host>-<pid>-<rand>
        ...write files into tmp...
    # on a clean exit: tmp/manifest.json written last, every file and directory fsynced, then
    #   final -> .<name>.old-<host>-<pid>-<rand>   (only if final exists)
    #   tmp   -> final, fsync(parent)
    #   remove the old copy
    # on an exception: tmp removed, final untouched

A crash between the two renames leaves no `final` but an old copy beside it: `recover_dir` (called by
`committed_manifest`, i.e. by every reader that checks completeness) renames it back. A crash before leaves the old
`final` and a stale temp directory, removed once its writer is known dead; a crash after leaves the new `final` and
an old copy, removed at the next write or recovery.

This module is below essaflow.storage (which downloads through it) and imports nothing of the pipeline.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from essaflow.storage.manifest import MANIFEST, verify_manifest, write_manifest

_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"
_OWNER = re.compile(r"^(?P<host>[A-Za-z0-9_-]*)-(?P<pid>\d+)-[0-9a-f]{8}$")
_OLD_SIBLING = re.compile(r"^\.(?P<name>.+)\.old-[A-Za-z0-9_-]*-\d+-[0-9a-f]{8}$")
_ATTEMPTS = 5  # install retries when a concurrent writer or reader put a `final` back between our two renames


def _sibling(final: Path, kind: str) -> Path:
    return final.with_name(f".{final.name}.{kind}-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def staging_dir(final: Path) -> Path:
    """Create and return a fresh hidden temporary sibling of ``final`` to write the new content into."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    path = _sibling(final, "tmp")
    path.mkdir()
    return path


def _fsync_path(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (so a rename never publishes unwritten data)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            _fsync_path(os.path.join(dirpath, name))
        _fsync_path(dirpath)


def remove_dir(path: Path) -> None:
    """Delete a directory, its manifest first (so a half-deleted directory never looks complete)."""
    path = Path(path)
    if path.is_dir():
        (path / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def install_dir(staging: Path, final: Path) -> Path:
    """Move a fully written (and fsynced) ``staging`` directory to ``final``, keeping any old copy until it is in.

    The old ``final`` is renamed aside first and removed only after the new one is in place and the parent fsynced.
    """
    staging, final = Path(staging), Path(final)
    olds: list[Path] = []
    for attempt in range(_ATTEMPTS):
        if final.exists() or final.is_symlink():
            olds.append(_sibling(final, "old"))
            os.rename(final, olds[-1])
        try:
            os.rename(staging, final)
            break
        except OSError as e:
            if olds and not final.exists():
                os.rename(olds.pop(), final)  # put the old copy back before giving up or retrying
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt == _ATTEMPTS - 1:
                raise
    _fsync_path(final.parent)
    for old in olds:
        remove_dir(old)
    clean_siblings(final)
    return final


def commit_dir(staging: Path, final: Path, manifest: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """Write the manifest last into ``staging`` (built from its files unless given), fsync, install as ``final``."""
    written = write_manifest(staging, manifest, **meta)
    fsync_tree(staging)
    install_dir(staging, final)
    return written


@contextmanager
def atomic_dir(final: Path, **meta: Any) -> Iterator[Path]:
    """Yield a temporary sibling of ``final`` to fill; on a clean exit commit it (manifest + ``meta``) as ``final``.

    On an exception the temporary directory is removed and ``final`` is left as it was.
    """
    staging = staging_dir(final)
    try:
        yield staging
        commit_dir(staging, final, **meta)
    except BaseException:
        remove_dir(staging)
        raise


def _writer_dead(owner: str) -> bool:
    m = _OWNER.match(owner)
    if m is None or m["host"] != _HOST:
        return False  # another machine's writer (shared file system): cannot tell, leave it
    pid = int(m["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def clean_siblings(final: Path) -> None:
    """Remove old copies of ``final`` once ``final`` exists, and temp directories whose writer is dead."""
    final = Path(final)
    if not final.parent.is_dir():
        return
    present = final.exists()
    for entry in final.parent.iterdir():
        for kind in ("old", "tmp"):
            prefix = f".{final.name}.{kind}-"
            if entry.name.startswith(prefix):
                owner = entry.name[len(prefix) :]
                if (kind == "old" and present and _OWNER.match(owner)) or (kind == "tmp" and _writer_dead(owner)):
                    remove_dir(entry)


def recover_dir(final: Path) -> bool:
    """If ``final`` is missing but a crashed swap left an old copy, rename the newest one back; True if it did."""
    final = Path(final)
    if final.exists() or not final.parent.is_dir():
        return False
    prefix = f".{final.name}.old-"
    olds = [e for e in final.parent.iterdir() if e.name.startswith(prefix) and _OWNER.match(e.name[len(prefix) :])]
    for old in sorted(olds, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            os.rename(old, final)
        except OSError:
            continue  # a concurrent writer or reader got there first
        clean_siblings(final)
        return True
    return False


def recover_children(parent: Path) -> None:
    """`recover_dir` for every directory under ``parent`` that a crashed swap left missing."""
    if Path(parent).is_dir():
        for entry in list(Path(parent).iterdir()):
            m = _OLD_SIBLING.match(entry.name)
            if m is not None:
                recover_dir(Path(parent) / m["name"])


def committed_manifest(final: Path) -> dict[str, Any] | None:
    """The verified manifest of the directory ``final`` (recovered first if a swap crashed), or None.

    None means incomplete (no valid manifest) or corrupt (a file's size or SHA-256 differs): treat it as absent.
    """
    final = Path(final)
    recover_dir(final)
    return verify_manifest(final)
