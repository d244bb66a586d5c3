"""open_store: a store from a ``file://`` or ``s3://`` URI, S3 settings from the arguments or the environment."""

from __future__ import annotations

from essaflow.environment import env_number
from essaflow.storage.base import ArtifactStore, StorageError
from essaflow.storage.files import FileStore
from essaflow.storage.s3 import S3Store, s3_env_problems, s3_settings_from_env


def open_store(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    retry_timeout: float | None = None,
) -> ArtifactStore:
    """Open ``file://dir`` (relative to the cwd unless absolute; a bare path works too) or ``s3://bucket/prefix``.

    S3 settings not given here come from the environment (:func:`s3_settings_from_env`); ``retry_timeout`` (how long
    one operation keeps retrying a transient failure) defaults to ``ESSAFLOW_S3_RETRY_TIMEOUT_S``, else 20 s.
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
        problems = s3_env_problems(keys=[k for k, given in (("endpoint_url", endpoint_url), ("region", region))
                                         if given is None])  # fmt: skip
        if problems:  # a variable boto3 refuses: named here, not as boto3's "Invalid endpoint: garbage"
            raise StorageError("; ".join(problems), "invalid")
        if access_key is None and secret_key is None:
            access_key, secret_key = env["access_key"], env["secret_key"]
        return S3Store(
            bucket,
            prefix,
            endpoint_url=endpoint_url or env["endpoint_url"],
            region=region or env["region"],
            access_key=access_key,
            secret_key=secret_key,
            retry_timeout=env_number("ESSAFLOW_S3_RETRY_TIMEOUT_S") if retry_timeout is None else retry_timeout,
        )
    if "://" in uri:
        scheme = uri.split("://")[0]
        raise StorageError(f"unsupported storage URI scheme {scheme!r}: use file:// or s3://", "invalid")
    return FileStore(uri)
