"""Data that arrives in shards: a file, a directory, a glob or an s3:// prefix, listed as one snapshot and read.

The snapshot is the list of files a run reads, each with its version (a local file's SHA-256, an S3 object's ETag
and size), and one digest over them: the dataset cache key, the run's MLflow dataset input and its summary name the
same snapshot. Listing reads no data; reading reads exactly the listed files, each a Table whose errors name the
file (for S3, its URI, not the temporary copy).

In a directory or under a prefix every file is a shard, in any of the supported formats, except hidden and
`_`-prefixed names (`.git`, `_SUCCESS`); any other file is an error naming it, as is a prefix with no shards.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from essaflow.data.errors import DataFileError
from essaflow.data.readers import SUFFIXES, Record, Table, read_file
from essaflow.storage.sha256 import sha256_bytes

_GLOB = set("*?[")


@dataclass(frozen=True)
class Snapshot:
    """What a source holds now: its files and their versions ({uri: version}), and one digest of them."""

    source: str
    files: dict[str, str] = field(default_factory=dict)
    digest: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "digest": self.digest, "files": dict(self.files)}


def digest_of(obj: object) -> str:
    """Short digest of a JSON value (sorted keys)."""
    return sha256_bytes(json.dumps(obj, sort_keys=True).encode())[:16]


def files_snapshot(source: str, files: dict[str, str]) -> Snapshot:
    return Snapshot(source, dict(sorted(files.items())), digest_of(sorted(files.items())))


def is_glob(path: str) -> bool:
    return bool(_GLOB & set(path))


def _is_shard_name(name: str) -> bool:
    return not name.startswith((".", "_"))


def _check_suffix(uri: str, root: str) -> None:
    suffix = Path(uri).suffix.lower()
    if suffix not in SUFFIXES:
        raise DataFileError(
            f"{uri}: not a data file ({suffix or 'no suffix'}) in {root}; shards are {', '.join(SUFFIXES)} files "
            "(hidden and _-prefixed names are skipped)"
        )


# ------------------------------------------------------------------------------------------------------ listing


def local_snapshot(path: str) -> Snapshot:
    """A local file, a directory of shards (recursively) or a glob (`**` matches folders)."""
    from essaflow.storage.digest_cache import file_digest

    expanded = os.path.expanduser(path)
    if is_glob(expanded):
        found = sorted(p for p in glob.glob(expanded, recursive=True) if Path(p).is_file())
        found = [p for p in found if _is_shard_name(Path(p).name)]
        if not found:
            raise DataFileError(f"{path}: no files match data.path")
    elif Path(expanded).is_dir():
        found = []
        for dirpath, dirs, names in os.walk(expanded):
            dirs[:] = sorted(d for d in dirs if _is_shard_name(d))
            found += [os.path.join(dirpath, n) for n in sorted(names) if _is_shard_name(n)]
        if not found:
            raise DataFileError(f"{path}: no data files in the directory")
    elif Path(expanded).is_file():
        found = [expanded]
    else:
        raise DataFileError(f"{path}: {missing_path(path, expanded)}")
    for p in found if len(found) > 1 or found[0] != expanded else []:  # one named file: read_file says why
        _check_suffix(p, path)
    return files_snapshot(path, {p: file_digest(p) for p in found})


#: what a path that is no file or directory is, by its stat type
_NOT_REGULAR = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a named pipe",
                stat.S_IFSOCK: "a socket"}  # fmt: skip


def missing_path(path: str, expanded: str) -> str:
    """Why a local data.path names nothing to read: a symlink loop, a link to nothing, a device, pipe or socket
    (read forever or never), a path that is no local one, or none there (a relative path is read from the current
    directory: name it)."""
    link = Path(expanded)
    try:
        mode = os.stat(expanded).st_mode
    except OSError as err:
        mode = None
        if link.is_symlink() and err.errno == errno.ELOOP:
            return "data.path is a symlink loop (its links never reach a file): point it at the data file"
    if mode is not None:  # there, but neither a file nor a directory: /dev/zero, a pipe, a socket
        kind = _NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")
        target = f" (a symlink to {os.path.realpath(expanded)!r})" if link.is_symlink() else ""
        return f"data.path is {kind}{target}, not a regular file or directory: point it at the data file"
    if link.is_symlink():
        return f"data.path is a symlink to {os.readlink(expanded)!r}, which does not exist"
    if path.startswith("s3://"):
        return "data.path is an s3:// URI: set data.source=s3"
    if not link.is_absolute():
        return f"data.path does not exist (relative to the current directory {Path.cwd()}: the file is yours to supply)"
    return "data.path does not exist"


def s3_snapshot(uri: str) -> Snapshot:
    """One object (a name with a data suffix), every object under a prefix, or the objects a glob matches."""
    from essaflow.storage import open_store

    if is_glob(uri):
        cut = min(uri.index(c) for c in _GLOB if c in uri)
        root = uri[:cut].rsplit("/", 1)[0]
        listed = open_store(root).versions("")
        files = {f"{root}/{k}": v for k, v in listed.items() if fnmatch.fnmatchcase(f"{root}/{k}", uri)}
    elif Path(uri).suffix.lower() in SUFFIXES and not uri.endswith("/"):
        root, _, name = uri.rpartition("/")
        files = {f"{root}/{k}": v for k, v in open_store(root).versions(name).items()}
        if not files:
            raise DataFileError(f"{uri}: no such object")
    else:
        root = uri.rstrip("/")
        files = {f"{root}/{k}": v for k, v in open_store(root).versions("").items()}
    files = {k: v for k, v in files.items() if all(_is_shard_name(part) for part in k[len(root) :].split("/") if part)}
    if not files:
        raise DataFileError(f"{uri}: no data files under the prefix" if not is_glob(uri) else f"{uri}: no match")
    for k in files:
        _check_suffix(k, uri)
    return files_snapshot(uri, files)


# ------------------------------------------------------------------------------------------------------ reading


def read_snapshot(snapshot: Snapshot) -> Table:
    """The records of every file in the snapshot, as one Table.

    One file reads as it always has. Several: each record's place starts with its file's name under the source
    (`part-2.jsonl line 4`) and a row without an id gets `<file>:<row>`, so ids stay unique and stable when shards
    are added. A column the rows need must be in every shard (checked per shard by the caller).
    """
    tables = [_read_one(uri) for uri in snapshot.files]
    if len(tables) == 1:
        return tables[0]
    merged = Table(snapshot.source)
    prefix = os.path.commonprefix(list(snapshot.files)).rsplit("/", 1)[0]  # the folder the shards share
    for table in tables:
        name = table.source[len(prefix) :].lstrip("/") or table.source
        for i, r in enumerate(table.records):
            merged.records.append(Record(f"{name} {r.where}", r.values, r.problem, f"{name}:{i}"))
        for col in table.columns:
            if col not in merged._seen:
                merged._seen.add(col)
                merged.columns.append(col)
    merged.parts = tables
    return merged


def _read_one(uri: str) -> Table:
    if not uri.startswith("s3://"):
        return read_file(Path(uri), source=uri)
    from essaflow.storage import open_store

    root, _, name = uri.rpartition("/")
    with tempfile.TemporaryDirectory(prefix="essaflow-shard-") as tmp:
        local = open_store(root).download_file(name, Path(tmp) / name)
        return read_file(local, source=uri)  # errors name the URI, not the temporary copy
