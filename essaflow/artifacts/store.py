"""Which artifact store a run uses, and whether it answers."""

from __future__ import annotations

import os
import socket

from essaflow.config import PipelineConfig
from essaflow.storage import StorageError, open_store


def storage_uri_for(storage_uri: str) -> str:
    """The configured storage_uri, except that the built-in default yields to ESSAFLOW_STORAGE_URI when set.

    (A UI form or a deployment sends every field, so "left at the default" is the only signal we get.)
    """
    default = PipelineConfig.model_fields["storage_uri"].default
    if storage_uri == default and os.environ.get("ESSAFLOW_STORAGE_URI"):
        return os.environ["ESSAFLOW_STORAGE_URI"]
    return storage_uri


def check_storage(uri: str, retry_timeout: float = 2.0) -> str:
    """Fail fast (StorageError naming endpoint, bucket or credentials) unless the store answers; absolute URI.

    A connection refused (or a host name that does not resolve) at this first probe is kind `refused`, which no
    retry waits out: nothing serves at that endpoint until someone starts it or fixes the address. Later in a run,
    a refused connection is a server restarting, retried as `unreachable`."""
    store = open_store(uri, retry_timeout=retry_timeout)
    try:
        store.exists("runs")
    except StorageError as err:
        why = _nothing_there(err) if err.kind == "unreachable" else None
        if why is None:
            raise
        endpoint = getattr(store, "endpoint", uri)
        raise StorageError(
            f"S3 endpoint {endpoint} is unreachable: {why} (storage_uri {store.uri}); start the S3 server, or set "
            "ESSAFLOW_S3_ENDPOINT_URL to one that runs",
            "refused",
        ) from None  # the botocore chain adds nothing the line does not say
    return store.uri


def _nothing_there(err: BaseException) -> str | None:
    """'connection refused' or 'host name does not resolve' when that is what lies under `err`, else None."""
    seen = 0
    exc: BaseException | None = err
    while exc is not None and seen < 10:
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused, nothing listens there"
        if isinstance(exc, socket.gaierror):
            return "its host name does not resolve"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
