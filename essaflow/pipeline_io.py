"""Deprecated re-export shim: the old grab bag, split into essaflow.refs, essaflow.timing and essaflow.artifacts.

Kept only because tasks/training.py (being rewritten elsewhere) still imports from here; import from the new
modules instead, then delete this file.
"""

from essaflow.artifacts import (
    CHECKPOINT_DATA,
    SPLITS,
    check_storage,
    checkpoint_prefix,
    config_hash,
    dataset_name,
    fetch_dir,
    latest_checkpoint,
    local_digest,
    manifest_digest,
    publish_dataset,
    publish_dir,
    publish_eval,
    read_dataset,
    read_eval_report,
    restore_checkpoint,
    storage_uri_for,
    sync_checkpoint,
)
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, ModelRef, PipelineResult, Ref, RegisteredRef, RunRef
from essaflow.timing import Timer

__all__ = [
    "CHECKPOINT_DATA",
    "SPLITS",
    "AdapterRef",
    "DatasetRef",
    "EvalRef",
    "ModelRef",
    "PipelineResult",
    "Ref",
    "RegisteredRef",
    "RunRef",
    "Timer",
    "check_storage",
    "checkpoint_prefix",
    "config_hash",
    "dataset_name",
    "fetch_dir",
    "latest_checkpoint",
    "local_digest",
    "manifest_digest",
    "publish_dataset",
    "publish_dir",
    "publish_eval",
    "read_dataset",
    "read_eval_report",
    "restore_checkpoint",
    "storage_uri_for",
    "sync_checkpoint",
]
