"""S3Store: artifacts in an S3 bucket on any S3-compatible endpoint, with transient failures retried.

One file past ~400 lines on purpose: it is one backend, and its client set-up, the retry loop and the mapping of
botocore errors to StorageError kinds are used by every operation below; split, each piece would need the others.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from essaflow.secrets import safe_uri, scrub_exception
from essaflow.storage.base import (
    MANIFEST,
    ArtifactStore,
    StorageError,
    T,
    _clean_key,
    _join,
)
from essaflow.storage.sha256 import CHUNK as _CHUNK
from essaflow.storage.sha256 import sha256_bytes, sha256_file

log = logging.getLogger(__name__)

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
    """An endpoint URL without any ``user:password@`` part (nor query: there credentials hide too)."""
    return safe_uri(url) if url else "<default AWS endpoint>"


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


#: endpoints that answered in this process: a refused connection there later is a server restarting
_REACHED: set[str] = set()


def _nothing_listens(url: str, timeout: float) -> str | None:
    """Why nothing can answer at `url`, found by one TCP connection (no request): "connection refused, nothing
    listens there" or "its host name does not resolve". None when something listens (a server starting: botocore's
    next try may reach it), a proxy stands between (the requests go there), or the connection failed otherwise (a
    timeout: the retries may wait that out)."""
    import socket
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxied = urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname or "")
    if proxied or not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except ConnectionRefusedError:
        return "connection refused, nothing listens there"
    except socket.gaierror:
        return "its host name does not resolve"
    except OSError:  # a timeout, a network unreachable: left to the retries
        pass
    return None


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
        try:
            client = session.client("s3", endpoint_url=self.endpoint_url, config=Config(**options))
        except ValueError as err:  # botocore: "Invalid endpoint: ...", an InvalidRegionError
            scrub_exception(err)
            raise StorageError(
                f"S3 client for {self.uri} (endpoint {_safe_url(self.endpoint_url)}, region {self.region!r}): {err}",
                "invalid",
            ) from None
        if self.endpoint_url:  # before botocore's own retry handler: it sees each attempt first
            client.meta.events.register_first("needs-retry.s3", self._first_contact)
        return client

    def _first_contact(self, response: Any = None, caught_exception: BaseException | None = None, **_: Any) -> None:
        """botocore's needs-retry, for each attempt until the endpoint first answers in this process: an attempt
        that could not connect is followed by one TCP connection, and refused (or a host name that does not
        resolve) fails at once as kind `refused`, naming the endpoint and its variable: nothing serves there until
        someone starts it or fixes the address, and botocore's tries then ours took 20-24 s to say so. Once the
        endpoint answered, a refused connection is a server restarting, retried as `unreachable`. Returns None:
        the retry handlers after it decide."""
        from botocore.exceptions import ConnectionError as BotoConnectionError

        url = self.endpoint_url
        if url in _REACHED:
            return
        if response is not None:  # any HTTP answer, an error status too: something serves there
            _REACHED.add(url)
            return
        if not isinstance(caught_exception, BotoConnectionError):
            return
        why = _nothing_listens(url, self._timeouts[0])
        if why is None:
            return
        scrub_exception(caught_exception)  # botocore's message names the endpoint URL, password and all
        name = _first_set(os.environ, S3_ENV["endpoint_url"])
        variable = name if name and os.environ[name] == url else "ESSAFLOW_S3_ENDPOINT_URL"
        fix = f"start the S3 server, or set {variable} to one that runs"
        message = f"S3 endpoint {self.endpoint} is unreachable: {why} (storage_uri {self.uri}); {fix}"
        raise StorageError(message, "refused") from caught_exception

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={_safe_url(self.endpoint_url)!r})"

    @property
    def client(self) -> Any:
        """The boto3 S3 client every request of this store (and of its children) goes through: its `meta.config`
        holds the timeouts, retries and addressing; `meta.events` is botocore's hook to observe or stub requests."""
        return self._client

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

        scrub_exception(exc)  # botocore's message names the endpoint URL, password and all; it is chained below
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
        sha = sha256_bytes(data)
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
        if expected and sha256_bytes(data) != expected:
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

    def versions(self, prefix: str = "") -> dict[str, str]:
        """ETag and size from one listing (no object is read): a rewritten object gets a new ETag."""
        prefix = _clean_key(prefix, allow_empty=True)
        full_prefix = _join(self.prefix, prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0

        def scan():
            found = {}
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full_prefix):
                for o in page.get("Contents", []):
                    key = o["Key"]
                    # the object itself, or one under the directory prefix (not a sibling sharing its start)
                    inside = not full_prefix or key == full_prefix or key.startswith(full_prefix + "/")
                    if inside and not key.endswith("/"):
                        found[key[cut:]] = f"{o.get('ETag', '').strip(chr(34))}:{o.get('Size', 0)}"
            return dict(sorted(found.items()))

        return self._call("list", prefix, scan)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        prefix = _clean_key(prefix, allow_empty=True)
        full_prefix = _join(self.prefix, prefix)
        s3_prefix = full_prefix + "/" if full_prefix else ""
        cut = len(self.prefix) + 1 if self.prefix else 0

        def scan():
            found = {}
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=s3_prefix):
                found.update({o["Key"][cut:]: int(o.get("Size", 0)) for o in page.get("Contents", [])})
            return {k: v for k, v in sorted(found.items()) if not k.endswith("/")}

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
        sha, _size = sha256_file(local)
        self._upload_known(local, key, sha)
        return sha

    def _fetch_to(self, key: str, dest: Path) -> None:
        full = self._key(key)
        cfg = self._transfer_config()
        self._call("download", key, lambda: self._client.download_file(self.bucket, full, str(dest), Config=cfg))

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
        sha = sha256_bytes(data)
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


#: where each S3 setting is read from: the first of its variables that is set (and not empty)
S3_ENV = {
    "endpoint_url": ("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key": ("AWS_ACCESS_KEY_ID",),
    "secret_key": ("AWS_SECRET_ACCESS_KEY",),
}
#: botocore's rule for a region name (botocore.utils.validate_region_name)
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?")


def _first_set(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if env.get(n)), None)


def s3_settings_from_env(environ: Mapping[str, str] | None = None) -> dict:
    """S3 settings from the environment, as keyword arguments for :func:`open_store`.

    endpoint: ``ESSAFLOW_S3_ENDPOINT_URL``, else ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``;
    region: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``; credentials: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``.
    Unset values are None (boto3 then uses its default chain: profiles, instance roles, ...).
    """
    env = os.environ if environ is None else environ
    out = {}
    for key, names in S3_ENV.items():
        name = _first_set(env, names)
        out[key] = env[name] if name else None
    return out


def s3_endpoint_problem(url: str) -> str | None:
    """What boto3 would refuse in an endpoint URL, as the words after it (None: nothing)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parses the port: a ValueError names a bad one
    except ValueError as err:
        return f"is malformed ({err})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an endpoint URL"
    return None


def s3_env_problems(
    environ: Mapping[str, str] | None = None, keys: Iterable[str] = ("endpoint_url", "region")
) -> list[str]:
    """The S3 endpoint and region variables (of `keys`) set to what boto3 refuses, one line each naming the variable
    and the fix (boto3 says only "Invalid endpoint: ..." or "Provided region_name ... doesn't match a supported
    format")."""
    env = os.environ if environ is None else environ
    keys = set(keys)
    problems = []
    name = _first_set(env, S3_ENV["endpoint_url"]) if "endpoint_url" in keys else None
    why = s3_endpoint_problem(env[name]) if name else None
    if name and why:
        problems.append(
            f"{name}={_safe_url(env[name])!r} {why}: give http(s)://host[:port] of the S3 server (e.g. "
            "http://127.0.0.1:8333), or unset it for AWS S3"
        )
    name = _first_set(env, S3_ENV["region"]) if "region" in keys else None
    if name and not _REGION.fullmatch(env[name]):
        value = env[name] if len(env[name]) <= 40 else env[name][:40] + "..."
        problems.append(
            f"{name}={value!r} is not a region name (letters, digits and '-', e.g. us-east-1): fix it or unset it"
        )
    return problems
