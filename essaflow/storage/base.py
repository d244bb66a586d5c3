"""The storage interface (ArtifactStore), its error type and the helpers both backends share."""

from __future__ import annotations

import json
import logging
import os
import uuid
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from essaflow.storage.atomic_dir import commit_dir, remove_dir, staging_dir
from essaflow.storage.manifest import MANIFEST, read_manifest
from essaflow.storage.sha256 import sha256_file

log = logging.getLogger(__name__)

_TMP_MARK = ".essaflow-tmp-"

T = TypeVar("T")


class StorageError(RuntimeError):
    """A storage operation failed; the message names the problem.

    ``kind`` is a short machine-readable tag: ``unreachable`` (transient; a retry later may succeed),
    ``refused`` (nothing listens at the endpoint at a run's first probe: no retry waits that out),
    ``missing_bucket``, ``credentials``, ``missing_object``, ``integrity`` (checksum/size mismatch),
    ``incomplete`` (no manifest), ``conflict`` (a different artifact is already committed there),
    ``invalid`` (bad URI or key) or ``other``.
    """

    def __init__(self, message: str, kind: str = "other"):
        super().__init__(message)
        self.kind = kind

    @property
    def transient(self) -> bool:
        return self.kind == "unreachable"


# ----------------------------------------------------------------------------------------------------------- keys


def _clean_key(key: str, *, allow_empty: bool = False) -> str:
    """Normalise a relative key ``a/b/c``: no leading/trailing slash, no empty, ``.`` or ``..`` segment."""
    if not isinstance(key, str):
        raise StorageError(f"storage key must be a string, got {type(key).__name__}", "invalid")
    k = key.strip("/")
    if not k:
        if allow_empty:
            return ""
        raise StorageError("storage key is empty", "invalid")
    if "\\" in k or "\x00" in k:
        raise StorageError(f"invalid storage key {key!r}: backslash or NUL", "invalid")
    for part in k.split("/"):
        if part in ("", ".", ".."):
            raise StorageError(f"invalid storage key {key!r}: empty, '.' or '..' path segment", "invalid")
    return k


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _local_files(local_dir: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every regular file under ``local_dir``, sorted."""
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise StorageError(f"not a directory: {local_dir}", "invalid")
    out = []
    for p in sorted(local_dir.rglob("*")):
        if p.is_file():
            rel = p.relative_to(local_dir).as_posix()
            out.append((_clean_key(rel), p))
    return out


def _check_manifest(manifest: Any, where: str) -> dict:
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise StorageError(f"malformed manifest at {where}: no 'files' mapping", "integrity")
    for rel, meta in files.items():
        # A manifest is data from storage: it must not be able to name a path outside the artifact.
        if _clean_key(rel) != rel or not isinstance(meta, dict) or "sha256" not in meta or "size" not in meta:
            raise StorageError(f"malformed manifest at {where}: bad entry {rel!r}", "integrity")
    return manifest


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP_MARK}{uuid.uuid4().hex[:12]}")


# ------------------------------------------------------------------------------------------------------ the base


class ArtifactStore(ABC):
    """A root URI under which keys (``a/b/c.json``) name objects. Directory artifacts carry a manifest."""

    uri: str

    # -- backend primitives ------------------------------------------------------------------------------------
    @abstractmethod
    def child(self, prefix: str) -> ArtifactStore:
        """A store rooted at ``uri/prefix``."""

    @abstractmethod
    def url(self, key: str) -> str:
        """Full URI of ``key``."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> str:
        """Write ``data`` atomically at ``key``; returns its SHA-256 hex digest."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys (relative to the root, sorted) of every object under the directory ``prefix`` (all if empty)."""

    @abstractmethod
    def versions(self, prefix: str = "") -> dict[str, str]:
        """{key: version} of every object under ``prefix`` (or of the object ``prefix`` itself): a version changes
        whenever the object's bytes do (S3: ETag and size; files: SHA-256). Content-keyed caches use it."""

    @abstractmethod
    def sizes(self, prefix: str = "") -> dict[str, int]:
        """{key: size in bytes} of every object under the directory ``prefix`` (all if empty), from one listing:
        what deleting it frees (retention's dry run and sweep)."""

    @abstractmethod
    def upload_file(self, local: Path, key: str) -> str:
        """Copy a local file to ``key`` (multipart on S3 for large files); returns its SHA-256."""

    def download_file(self, key: str, local: Path) -> Path:
        """Copy ``key`` to ``local`` atomically (temp file + rename); returns ``local``."""
        local = Path(local).absolute()
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_sibling(local)
        try:
            self._fetch_to(key, tmp)
            os.replace(tmp, local)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return local

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under the directory ``prefix`` (manifests first, so nothing half-deleted looks
        complete). An empty prefix deletes everything under the root."""

    @abstractmethod
    def _upload_known(self, local: Path, key: str, sha256: str) -> None:
        """Upload a file whose SHA-256 is already known."""

    @abstractmethod
    def _fetch_to(self, key: str, dest: Path) -> None:
        """Copy ``key`` to ``dest`` (``dest`` is already a private temp path)."""

    @abstractmethod
    def _remote_digest(self, key: str) -> tuple[str, int]:
        """(sha256, size) of the stored object, computed by reading it back."""

    @abstractmethod
    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if it does not exist; False if it already existed."""

    @abstractmethod
    def _delete_keys(self, keys: list[str]) -> None: ...

    # -- shared behaviour -------------------------------------------------------------------------------------
    def put_json(self, key: str, obj: Any) -> str:
        return self.put_bytes(key, _dump_json(obj))

    def create_json(self, key: str, obj: Any) -> bool:
        """Write ``obj`` at ``key`` only if nothing is there (S3 ``If-None-Match: *``, a hard link on files): of two
        writers racing for one key exactly one gets True. Leases (essaflow/runs/lease.py) are built on it."""
        return bool(self._put_if_absent(_clean_key(key), _dump_json(obj)))

    def get_json(self, key: str) -> Any:
        data = self.get_bytes(key)
        try:
            return json.loads(data)
        except ValueError as e:
            raise StorageError(f"{self.url(key)} is not valid JSON: {e}", "integrity") from None

    def _manifest_or_none(self, prefix: str) -> dict | None:
        mkey = _join(prefix, MANIFEST)
        try:
            raw = self.get_bytes(mkey)
        except StorageError as e:
            if e.kind == "missing_object":
                return None
            raise
        try:
            manifest = json.loads(raw)
        except ValueError:
            raise StorageError(f"malformed manifest at {self.url(mkey)}: not JSON", "integrity") from None
        return _check_manifest(manifest, self.url(mkey))

    def read_manifest(self, prefix: str) -> dict:
        """The manifest of the directory artifact at ``prefix``; StorageError("incomplete artifact") if absent."""
        prefix = _clean_key(prefix, allow_empty=True)
        manifest = self._manifest_or_none(prefix)
        if manifest is None:
            raise StorageError(
                f"incomplete artifact: no {MANIFEST} at {self.url(_join(prefix, MANIFEST))} "
                "(never written, or an upload did not finish)",
                "incomplete",
            )
        return manifest

    def upload_dir(self, local_dir: Path, prefix: str, *, overwrite: bool = False) -> dict:
        """Upload every file under ``local_dir`` to ``prefix/``, then write ``prefix/manifest.json`` last.

        Idempotent: if the same files (same paths and SHA-256) are already committed there, nothing is uploaded
        and the existing manifest is returned. A *different* committed artifact is a ``conflict`` StorageError
        unless ``overwrite=True`` (which first removes the old manifest, so the old artifact stops being visible
        before any of its files change). A local directory written by ``essaflow.storage.atomic_dir`` carries its own
        manifest (the same format): it is checked against the files and not uploaded as a data file.
        """
        prefix = _clean_key(prefix, allow_empty=True)
        local = _local_files(Path(local_dir))
        own_manifest = any(rel == MANIFEST for rel, _ in local)
        local = [(rel, path) for rel, path in local if rel != MANIFEST]
        files = {}
        for rel, path in local:
            sha, size = sha256_file(path)
            files[rel] = {"sha256": sha, "size": size}
        if own_manifest and (read_manifest(Path(local_dir)) or {}).get("files") != files:
            raise StorageError(
                f"{local_dir} contains a top-level {MANIFEST} that is not the manifest of its files (reserved name)",
                "invalid",
            )
        mkey = _join(prefix, MANIFEST)

        existing = self._manifest_or_none(prefix)
        if existing is not None:
            if existing["files"] == files:
                log.info("artifact %s already committed with identical files", self.url(prefix))
                return existing
            if not overwrite:
                raise StorageError(
                    f"a different artifact is already committed at {self.url(prefix)}; "
                    "delete it first or pass overwrite=True",
                    "conflict",
                )
            self._delete_keys([mkey])

        for rel, path in local:
            self._upload_known(path, _join(prefix, rel), files[rel]["sha256"])
        manifest = {"files": files, "created": datetime.now(timezone.utc).isoformat()}
        if not self._put_if_absent(mkey, _dump_json(manifest)):
            # Someone committed between our check and now. Fine if it is the same artifact.
            other = self._manifest_or_none(prefix)
            if other is not None and other["files"] == files:
                return other
            raise StorageError(f"a different artifact was committed concurrently at {self.url(prefix)}", "conflict")
        log.info("committed %d files to %s", len(files), self.url(prefix))
        return manifest

    def download_dir(self, prefix: str, local_dir: Path) -> Path:
        """Download the artifact at ``prefix`` into ``local_dir``, verifying every SHA-256 and size.

        Requires the manifest. Files go to a temp directory beside ``local_dir`` that gets the manifest last and is
        swapped into place (``storage.atomic_dir``) only after every file checked out, so ``local_dir`` is either
        the complete verified artifact (with its manifest.json) or what it was before.
        """
        prefix = _clean_key(prefix, allow_empty=True)
        manifest = self.read_manifest(prefix)
        final = Path(local_dir).absolute()
        tmp = staging_dir(final)
        try:
            for rel, meta in sorted(manifest["files"].items()):
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self._fetch_to(_join(prefix, rel), dest)
                sha, size = sha256_file(dest)
                _compare(self.url(_join(prefix, rel)), meta, sha, size)
            commit_dir(tmp, final, manifest)
        except BaseException:
            remove_dir(tmp)
            raise
        return final

    def verify(self, prefix: str) -> dict:
        """Re-read every file of the artifact at ``prefix`` and check it against the manifest; returns it."""
        prefix = _clean_key(prefix, allow_empty=True)
        manifest = self.read_manifest(prefix)
        for rel, meta in sorted(manifest["files"].items()):
            key = _join(prefix, rel)
            try:
                sha, size = self._remote_digest(key)
            except StorageError as e:
                if e.kind == "missing_object":
                    raise StorageError(
                        f"artifact {self.url(prefix)} is damaged: file {rel} listed in the manifest is missing",
                        "integrity",
                    ) from None
                raise
            _compare(self.url(key), meta, sha, size)
        return manifest

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def _dump_json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _compare(where: str, meta: dict, sha: str, size: int) -> None:
    if sha != meta["sha256"] or size != meta["size"]:
        raise StorageError(
            f"checksum mismatch for {where}: manifest says sha256 {meta['sha256'][:16]}... ({meta['size']} bytes), "
            f"stored object has sha256 {sha[:16]}... ({size} bytes)",
            "integrity",
        )
