"""Which artifact store a run uses, and whether it answers."""

from __future__ import annotations

import os

from essaflow.config import PipelineConfig
from essaflow.storage import open_store


def storage_uri_for(storage_uri: str) -> str:
    """The configured storage_uri, except that the built-in default yields to ESSAFLOW_STORAGE_URI when set.

    (A UI form or a deployment sends every field, so "left at the default" is the only signal we get.)
    """
    default = PipelineConfig.model_fields["storage_uri"].default
    if storage_uri == default and os.environ.get("ESSAFLOW_STORAGE_URI"):
        return os.environ["ESSAFLOW_STORAGE_URI"]
    return storage_uri


def check_storage(uri: str, retry_timeout: float = 2.0) -> str:
    """Fail fast (StorageError naming endpoint, bucket or credentials) unless the store answers; absolute URI."""
    store = open_store(uri, retry_timeout=retry_timeout)
    store.exists("runs")
    return store.uri
