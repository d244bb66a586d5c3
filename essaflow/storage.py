"""Artifact storage over ``file://`` directories and ``s3://`` buckets (any S3 endpoint).

One interface, two backends. Every write is atomic: a file store writes a temp file in the target directory and
renames it; an S3 object only becomes visible once its PUT (or multipart upload) completes. A directory artifact
(``upload_dir``) is a set of data objects plus ``manifest.json`` written LAST, holding the SHA-256 and size of every
file, so a reader that finds the manifest finds everything, and ``download_dir``/``verify`` check every checksum.
The manifest is written with a conditional create (``If-None-Match: *`` on S3, a hard link on a file system), so
an artifact, once committed, is never silently replaced.

Transient S3 failures (connection refused/reset, timeouts, HTTP 500/502/503/504) are retried twice over: botocore's
"standard" retry mode makes up to 8 fast attempts inside each call (50 ms base backoff, at most ~6 s in all), and the
store retries the whole operation with exponential backoff and jitter (0.25 s doubling, capped at 4 s) and starts no
new attempt after ``retry_timeout`` seconds (20 s by default). So a server that is down for a few seconds is ridden
out, and one that is down for good is reported within about 30 s: a refused connection after ~20-27 s, a host that
does not answer at all (2 s connect timeout x 8 attempts) after ~22-28 s. A server that accepts connections but never
answers is bounded by the 20 s read timeout per attempt.

Every failure is a :class:`StorageError` with one message that names the problem (unreachable endpoint, missing
bucket, rejected credentials, missing object, checksum mismatch, incomplete artifact) and never contains a
credential. Nothing read back executes code: data are bytes, JSON or files.

This module never imports prefect.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_TMP_MARK = ".essaflow-tmp-"
_CHUNK = 1024 * 1024

T = TypeVar("T")

__all__ = [
    "MANIFEST",
    "ArtifactStore",
    "FileStore",
    "S3Store",
    "StorageError",
    "open_store",
    "s3_settings_from_env",
]


class StorageError(RuntimeError):
    """A storage operation failed; the message names the problem.

    ``kind`` is a short machine-readable tag: ``unreachable`` (transient; a retry later may succeed),
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


def _sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


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


def _install_dir(tmp: Path, final: Path) -> None:
    """Move a fully written temp directory into place (replacing an existing one)."""
    if final.exists() or final.is_symlink():
        old = final.with_name(f".{final.name}.essaflow-old-{uuid.uuid4().hex[:12]}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)


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
    def upload_file(self, local: Path, key: str) -> str:
        """Copy a local file to ``key`` (multipart on S3 for large files); returns its SHA-256."""

    @abstractmethod
    def download_file(self, key: str, local: Path) -> Path:
        """Copy ``key`` to ``local`` atomically (temp file + rename); returns ``local``."""

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
        before any of its files change).
        """
        prefix = _clean_key(prefix, allow_empty=True)
        local = _local_files(Path(local_dir))
        if any(rel == MANIFEST for rel, _ in local):
            raise StorageError(f"{local_dir} contains a top-level {MANIFEST}, which is reserved", "invalid")
        files = {}
        for rel, path in local:
            sha, size = _sha256_file(path)
            files[rel] = {"sha256": sha, "size": size}
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

        Requires the manifest. Files go to a temp directory beside ``local_dir`` that is renamed into place only
        after every file checked out, so ``local_dir`` is either the complete verified artifact or untouched.
        """
        prefix = _clean_key(prefix, allow_empty=True)
        manifest = self.read_manifest(prefix)
        final = Path(local_dir).absolute()
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_sibling(final)
        tmp.mkdir()
        try:
            for rel, meta in sorted(manifest["files"].items()):
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self._fetch_to(_join(prefix, rel), dest)
                sha, size = _sha256_file(dest)
                _compare(self.url(_join(prefix, rel)), meta, sha, size)
            _install_dir(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
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


# -------------------------------------------------------------------------------------------------- file store


class FileStore(ArtifactStore):
    """A directory on a local or shared file system. ``uri`` is ``file:///absolute/path``."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().absolute()
        self.uri = "file://" + self.root.as_posix()

    def child(self, prefix: str) -> FileStore:
        return FileStore(self.root / _clean_key(prefix, allow_empty=True))

    def url(self, key: str) -> str:
        return _join(self.uri, _clean_key(key, allow_empty=True))

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
        return hashlib.sha256(data).hexdigest()

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
        h = hashlib.sha256()

        def copy(f):
            with open(local, "rb") as src:
                while chunk := src.read(_CHUNK):
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

    def download_file(self, key: str, local: Path) -> Path:
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

    def _remote_digest(self, key: str) -> tuple[str, int]:
        path = self._path(key)
        if not path.is_file():
            raise self._missing(key)
        return _sha256_file(path)

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


# ---------------------------------------------------------------------------------------------------- S3 store

_TRANSIENT_STATUS = {500, 502, 503, 504}
_TRANSIENT_CODES = {"RequestTimeout", "SlowDown", "InternalError", "ServiceUnavailable", "Throttling", "503"}
_CREDENTIAL_CODES = {
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
    "AccessDenied",
    "AllAccessDisabled",
    "403",
}
_NOT_SUPPORTED_CODES = {"NotImplemented", "501", "InvalidArgument", "InvalidRequest"}


def _safe_url(url: str | None) -> str:
    """An endpoint URL without any ``user:password@`` part."""
    if not url:
        return "<default AWS endpoint>"
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts)


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap boto3's transfer wrappers (S3UploadFailedError, RetriesExceededError) to the botocore error."""
    seen = 0
    while seen < 5:
        seen += 1
        inner = getattr(exc, "last_exception", None)
        if inner is None and type(exc).__name__ in ("S3UploadFailedError", "S3TransferFailedError"):
            inner = exc.__cause__ or exc.__context__
        if inner is None:
            return exc
        exc = inner
    return exc


def _is_transient(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, ResponseStreamingError

    exc = _root_cause(exc)
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = exc.response.get("Error", {}).get("Code", "")
        return status in _TRANSIENT_STATUS or code in _TRANSIENT_CODES
    return isinstance(exc, ConnectionError | HTTPClientError | ResponseStreamingError | ConnectionResetError)


class S3Store(ArtifactStore):
    """``s3://bucket/prefix`` on AWS or any S3-compatible server (SeaweedFS, MinIO, Ceph).

    Credentials go straight into the boto3 session; the store keeps no copy, and neither ``repr`` nor any
    error message or log line contains them.
    """

    #: files at or above this size are uploaded in parts (S3's minimum part size is 5 MiB)
    multipart_threshold: int = 64 * 1024 * 1024
    multipart_chunksize: int = 16 * 1024 * 1024

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        retry_timeout: float = 20.0,
        connect_timeout: float = 2.0,
        read_timeout: float = 20.0,
        max_attempts: int = 8,
        _client: Any = None,
        _shared: dict | None = None,
    ):
        if not bucket:
            raise StorageError("S3 URI has no bucket name", "invalid")
        self.bucket = bucket
        self.prefix = _clean_key(prefix, allow_empty=True)
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url
        self.region = region or "us-east-1"
        self.retry_timeout = float(retry_timeout)
        self._timeouts = (connect_timeout, read_timeout, max_attempts)
        self._shared = _shared if _shared is not None else {"bucket_ok": False, "conditional": True}
        if _client is None:
            _client = self._make_client(access_key, secret_key)
        self._client = _client

    def _make_client(self, access_key: str | None, secret_key: str | None):
        import boto3
        from botocore.config import Config

        connect_timeout, read_timeout, max_attempts = self._timeouts
        custom = self.endpoint_url is not None and "amazonaws.com" not in self.endpoint_url
        options: dict[str, Any] = {
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "retries": {"mode": "standard", "total_max_attempts": max_attempts},
            "s3": {"addressing_style": "path" if custom else "auto"},
        }
        if custom:
            # Non-AWS servers vary in their support of the newer default CRC checksums; we verify SHA-256 ourselves.
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
        session = boto3.session.Session(
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            region_name=self.region,
        )
        return session.client("s3", endpoint_url=self.endpoint_url, config=Config(**options))

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={_safe_url(self.endpoint_url)!r})"

    def __getstate__(self):
        # Never serialise the client (it holds the credentials); a copy re-resolves them from its environment.
        state = self.__dict__.copy()
        state["_client"] = None
        state["_shared"] = {"bucket_ok": False, "conditional": True}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        env = s3_settings_from_env()
        self._client = self._make_client(env["access_key"], env["secret_key"])

    # -- addressing ---------------------------------------------------------------------------------------------
    def child(self, prefix: str) -> S3Store:
        new = object.__new__(S3Store)
        new.__dict__.update(self.__dict__)
        new.prefix = _join(self.prefix, _clean_key(prefix, allow_empty=True))
        new.uri = f"s3://{self.bucket}/{new.prefix}" if new.prefix else f"s3://{self.bucket}"
        return new

    def _key(self, key: str) -> str:
        return _join(self.prefix, _clean_key(key))

    def url(self, key: str) -> str:
        return _join(self.uri, _clean_key(key, allow_empty=True))

    @property
    def endpoint(self) -> str:
        return _safe_url(self.endpoint_url or getattr(self._client.meta, "endpoint_url", None))

    # -- error handling -----------------------------------------------------------------------------------------
    def _translate(self, exc: BaseException, action: str, key: str | None, attempts: int, elapsed: float):
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

        root = _root_cause(exc)
        where = self.url(key) if key is not None else self.uri
        if isinstance(root, StorageError):
            return root
        if isinstance(root, NoCredentialsError | PartialCredentialsError):
            return StorageError(
                f"no S3 credentials to {action} {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or pass access_key/secret_key)",
                "credentials",
            )
        if isinstance(root, ClientError):
            err = root.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = root.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return StorageError(f"S3 bucket '{self.bucket}' does not exist at {self.endpoint}", "missing_bucket")
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return StorageError(f"object not found: {where}", "missing_object")
            if code in _CREDENTIAL_CODES or status == 403:
                return StorageError(
                    f"S3 credentials rejected by {self.endpoint} ({code or status}) when trying to {action} {where}: "
                    "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's permissions",
                    "credentials",
                )
            kind = "unreachable" if _is_transient(root) else "other"
            return StorageError(
                f"S3 error {code or status} from {self.endpoint} when trying to {action} {where} "
                f"(after {attempts} attempt(s), {elapsed:.1f}s): {err.get('Message', '')}".rstrip(": "),
                kind,
            )
        if _is_transient(root):
            return StorageError(
                f"S3 endpoint {self.endpoint} is unreachable ({type(root).__name__}): could not {action} {where} "
                f"after {attempts} attempt(s) over {elapsed:.1f}s",
                "unreachable",
            )
        return StorageError(f"S3 failure when trying to {action} {where}: {type(root).__name__}: {root}")

    def _call(self, action: str, key: str | None, fn: Callable[[], T], *, check_bucket: bool = True) -> T:
        """Run ``fn`` retrying transient failures with backoff until ``retry_timeout``; translate errors."""
        if check_bucket and not self._shared["bucket_ok"]:
            self._check_bucket()
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except StorageError:
                raise
            except Exception as e:
                elapsed = time.monotonic() - start
                remaining = self.retry_timeout - elapsed
                if not _is_transient(e) or remaining <= 0:
                    raise self._translate(e, action, key, attempt, elapsed) from e
                delay = min(4.0, 0.25 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
                delay = min(delay, remaining)
                log.warning(
                    "S3 %s of %s failed (%s), retrying in %.1fs (attempt %d)",
                    action,
                    self.url(key) if key is not None else self.uri,
                    type(_root_cause(e)).__name__,
                    delay,
                    attempt,
                )
                time.sleep(delay)

    def _check_bucket(self) -> None:
        """Fail early and clearly on a missing bucket (a HEAD on a missing bucket's object is just 404)."""
        from botocore.exceptions import ClientError

        def head():
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 404:
                    raise StorageError(
                        f"S3 bucket '{self.bucket}' does not exist at {self.endpoint}", "missing_bucket"
                    ) from None
                if status == 403:  # may only lack s3:ListBucket; the real request will tell
                    return
                raise

        self._call("access bucket", None, head, check_bucket=False)
        self._shared["bucket_ok"] = True

    # -- primitives ---------------------------------------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> str:
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        full = self._key(key)
        self._call(
            "write",
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=data, Metadata={"sha256": sha}),
        )
        return sha

    def get_bytes(self, key: str) -> bytes:
        full = self._key(key)

        def get():
            resp = self._client.get_object(Bucket=self.bucket, Key=full)
            return resp["Body"].read(), resp.get("Metadata", {}).get("sha256")

        data, expected = self._call("read", key, get)
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise StorageError(f"checksum mismatch for {self.url(key)}: content differs from its sha256", "integrity")
        return data

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        full = self._key(key)

        def head():
            try:
                self._client.head_object(Bucket=self.bucket, Key=full)
                return True
            except ClientError as e:
                if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                    return False
                raise

        return self._call("check", key, head)

    def _list_full(self, prefix: str) -> list[str]:
        """Full keys under the directory ``prefix`` (relative to this store's root)."""
        prefix = _clean_key(prefix, allow_empty=True)
        full_prefix = _join(self.prefix, prefix)
        s3_prefix = full_prefix + "/" if full_prefix else ""

        def scan():
            keys = []
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=s3_prefix):
                keys.extend(o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/"))
            return keys

        return self._call("list", prefix, scan)

    def list(self, prefix: str = "") -> list[str]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted(k[cut:] for k in self._list_full(prefix))

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            max_concurrency=4,
        )

    def _upload_known(self, local: Path, key: str, sha256: str) -> None:
        full = self._key(key)
        cfg = self._transfer_config()
        self._call(
            "upload",
            key,
            lambda: self._client.upload_file(
                str(local), self.bucket, full, ExtraArgs={"Metadata": {"sha256": sha256}}, Config=cfg
            ),
        )

    def upload_file(self, local: Path, key: str) -> str:
        local = Path(local)
        if not local.is_file():
            raise StorageError(f"local file not found: {local}", "invalid")
        sha, _size = _sha256_file(local)
        self._upload_known(local, key, sha)
        return sha

    def _fetch_to(self, key: str, dest: Path) -> None:
        full = self._key(key)
        cfg = self._transfer_config()
        self._call("download", key, lambda: self._client.download_file(self.bucket, full, str(dest), Config=cfg))

    def download_file(self, key: str, local: Path) -> Path:
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

    def _remote_digest(self, key: str) -> tuple[str, int]:
        full = self._key(key)

        def digest():
            h = hashlib.sha256()
            size = 0
            body = self._client.get_object(Bucket=self.bucket, Key=full)["Body"]
            for chunk in body.iter_chunks(_CHUNK):
                h.update(chunk)
                size += len(chunk)
            return h.hexdigest(), size

        return self._call("read", key, digest)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        full = self._key(key)
        sha = hashlib.sha256(data).hexdigest()
        if self._shared["conditional"]:

            def put():
                try:
                    self._client.put_object(
                        Bucket=self.bucket, Key=full, Body=data, Metadata={"sha256": sha}, IfNoneMatch="*"
                    )
                    return True
                except ClientError as e:
                    code = str(e.response.get("Error", {}).get("Code", ""))
                    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                    if status == 412 or code == "PreconditionFailed":
                        return False
                    if status == 409 or code == "ConditionalRequestConflict":
                        return False  # a concurrent conditional write won; the caller re-reads it
                    if code in _NOT_SUPPORTED_CODES or status == 501:
                        return None
                    raise

            result = self._call("write", key, put)
            if result is not None:
                return result
            log.info("%s does not support conditional writes; falling back to check-then-put", self.endpoint)
            self._shared["conditional"] = False
        if self.exists(key):
            return False
        self._call(
            "write",
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=data, Metadata={"sha256": sha}),
        )
        return True

    def _delete_keys(self, keys: list[str]) -> None:
        full = [self._key(k) for k in keys]
        self._delete_full(full)

    def _delete_full(self, full: Iterable[str]) -> None:
        full = list(full)
        for i in range(0, len(full), 1000):
            batch = [{"Key": k} for k in full[i : i + 1000]]

            def delete(batch=batch):
                resp = self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
                errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
                if errors:
                    first = errors[0]
                    raise StorageError(
                        f"could not delete {len(errors)} object(s) under {self.uri}, e.g. "
                        f"s3://{self.bucket}/{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}"
                    )

            self._call("delete", None, delete)

    def delete_prefix(self, prefix: str) -> None:
        full = self._list_full(prefix)
        manifests = {k for k in full if k.rsplit("/", 1)[-1] == MANIFEST}
        self._delete_full(sorted(manifests))
        self._delete_full(k for k in full if k not in manifests)


# ------------------------------------------------------------------------------------------------------ factory


def s3_settings_from_env(environ: dict[str, str] | None = None) -> dict:
    """S3 settings from the environment, as keyword arguments for :func:`open_store`.

    endpoint: ``ESSAFLOW_S3_ENDPOINT_URL``, else ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``;
    region: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``; credentials: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``.
    Unset values are None (boto3 then uses its default chain: profiles, instance roles, ...).
    """
    env = os.environ if environ is None else environ

    def first(*names: str) -> str | None:
        for n in names:
            if env.get(n):
                return env[n]
        return None

    return {
        "endpoint_url": first("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        "region": first("AWS_REGION", "AWS_DEFAULT_REGION"),
        "access_key": first("AWS_ACCESS_KEY_ID"),
        "secret_key": first("AWS_SECRET_ACCESS_KEY"),
    }


def open_store(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    retry_timeout: float = 20.0,
) -> ArtifactStore:
    """Open ``file://dir`` (relative to the cwd unless absolute; a bare path works too) or ``s3://bucket/prefix``.

    S3 settings not given here come from the environment (:func:`s3_settings_from_env`).
    """
    if not isinstance(uri, str) or not uri:
        raise StorageError("storage URI is empty", "invalid")
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if path.startswith("localhost/"):
            path = path[len("localhost") :]
        if not path:
            raise StorageError(f"file URI has no path: {uri!r}", "invalid")
        return FileStore(path)
    if uri.startswith("s3://"):
        rest = uri[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        env = s3_settings_from_env()
        if access_key is None and secret_key is None:
            access_key, secret_key = env["access_key"], env["secret_key"]
        return S3Store(
            bucket,
            prefix,
            endpoint_url=endpoint_url or env["endpoint_url"],
            region=region or env["region"],
            access_key=access_key,
            secret_key=secret_key,
            retry_timeout=retry_timeout,
        )
    if "://" in uri:
        scheme = uri.split("://")[0]
        raise StorageError(f"unsupported storage URI scheme {scheme!r}: use file:// or s3://", "invalid")
    return FileStore(uri)
