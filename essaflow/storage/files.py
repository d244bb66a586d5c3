"""FileStore: artifacts in a directory on a local or shared file system (atomic renames, hard-link manifests)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from essaflow.storage.base import (
    _TMP_MARK,
    MANIFEST,
    ArtifactStore,
    StorageError,
    _clean_key,
    _join,
    _tmp_sibling,
)
from essaflow.storage.sha256 import CHUNK, sha256_bytes, sha256_file


class FileStore(ArtifactStore):
    """A directory on a local or shared file system. ``uri`` is ``file:///absolute/path``."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().absolute()
        self.uri = "file://" + self.root.as_posix()

    def child(self, prefix: str) -> FileStore:
        return FileStore(self.root / _clean_key(prefix, allow_empty=True))

    def url(self, key: str) -> str:
        return _join(self.uri, _clean_key(key, allow_empty=True))

    def versions(self, prefix: str = "") -> dict[str, str]:
        from essaflow.storage.digest_cache import file_digest

        if prefix and self._path(prefix).is_file():
            return {_clean_key(prefix): file_digest(self._path(prefix))}
        return {k: file_digest(self._path(k)) for k in self.list(prefix)}

    def sizes(self, prefix: str = "") -> dict[str, int]:
        return {k: self._path(k).stat().st_size for k in self.list(prefix)}

    def _path(self, key: str) -> Path:
        return self.root / _clean_key(key)

    def _missing(self, key: str) -> StorageError:
        return StorageError(f"object not found: {self.url(key)}", "missing_object")

    def _atomic_write(self, dest: Path, write: Callable[[Any], None]) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_sibling(dest)
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def put_bytes(self, key: str, data: bytes) -> str:
        data = bytes(data)
        try:
            self._atomic_write(self._path(key), lambda f: f.write(data))
        except OSError as e:
            raise StorageError(f"cannot write {self.url(key)}: {e.strerror or e}") from e
        return sha256_bytes(data)

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._missing(key) from None
        except OSError as e:
            raise StorageError(f"cannot read {self.url(key)}: {e.strerror or e}") from e

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        prefix = _clean_key(prefix, allow_empty=True)
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _dirs, names in os.walk(base):
            for name in names:
                if _TMP_MARK in name:
                    continue  # an in-flight (or crashed) atomic write: never visible
                keys.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return sorted(keys)

    def upload_file(self, local: Path, key: str) -> str:
        h = hashlib.sha256()  # hashed while copied: one read of the file

        def copy(f):
            with open(local, "rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    f.write(chunk)

        try:
            self._atomic_write(self._path(key), copy)
        except FileNotFoundError as e:
            if not Path(local).exists():
                raise StorageError(f"local file not found: {local}", "invalid") from None
            raise StorageError(f"cannot write {self.url(key)}: {e.strerror or e}") from e
        except OSError as e:
            raise StorageError(f"cannot write {self.url(key)}: {e.strerror or e}") from e
        return h.hexdigest()

    def _upload_known(self, local: Path, key: str, sha256: str) -> None:
        got = self.upload_file(local, key)
        if got != sha256:
            raise StorageError(f"{local} changed while it was being uploaded to {self.url(key)}", "integrity")

    def _fetch_to(self, key: str, dest: Path) -> None:
        try:
            shutil.copyfile(self._path(key), dest)
        except (FileNotFoundError, IsADirectoryError):
            if not self.exists(key):
                raise self._missing(key) from None
            raise

    def _remote_digest(self, key: str) -> tuple[str, int]:
        path = self._path(key)
        if not path.is_file():
            raise self._missing(key)
        return sha256_file(path)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_sibling(dest)
        tmp.write_bytes(data)
        try:
            os.link(tmp, dest)  # atomic, fails if dest exists
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links on this file system: best effort
            if dest.exists():
                return False
            os.replace(tmp, dest)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _delete_keys(self, keys: list[str]) -> None:
        for k in keys:
            self._path(k).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        prefix = _clean_key(prefix, allow_empty=True)
        keys = self.list(prefix)
        self._delete_keys([k for k in keys if k.rsplit("/", 1)[-1] == MANIFEST])
        base = self.root / prefix if prefix else self.root
        if prefix:
            shutil.rmtree(base, ignore_errors=True)
        elif base.is_dir():
            for entry in base.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
