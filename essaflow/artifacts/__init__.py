"""The pipeline's artifacts in storage: publish and fetch directories, datasets, run checkpoints, eval reports.

Each writer puts a directory artifact in the store (atomically, manifest last, SHA-256 per file; see
`essaflow.storage`) and returns a reference (`essaflow.refs`); the next stage, possibly on another machine or in a
retried process, downloads and verifies it. Layout (architecture):

    datasets/<name>/<hash>/{train,eval,sft}.parquet, info.json, manifest.json
    adapters/sft/<key>/...                       SFT warm start, addressed by its inputs' hash
    runs/<run_id>/record/run.json                the run's config, what a resume is checked against (resume.py)
    runs/<run_id>/checkpoints/<step>/data/...    trainer checkpoints, synced as they are written
    runs/<run_id>/adapter/                       the tuned adapter
    runs/<run_id>/eval/<label>/{samples.jsonl.gz, passk.json, passk.png}

Nothing read back executes code: Parquet, JSON and safetensors only. This package never imports prefect.
"""

from essaflow.artifacts.checkpoints import (
    CHECKPOINT_DATA,
    checkpoint_prefix,
    latest_stored_checkpoint,
    restore_checkpoint,
    sync_checkpoint,
)
from essaflow.artifacts.datasets import SPLITS, dataset_name, publish_dataset, read_dataset
from essaflow.artifacts.dirs import fetch_dir, publish_dir
from essaflow.artifacts.eval_reports import protocol_record, publish_eval, read_eval_report
from essaflow.artifacts.store import check_storage, storage_uri_for
from essaflow.storage.manifest import local_digest, manifest_digest
from essaflow.storage.sha256 import config_hash

__all__ = [
    "CHECKPOINT_DATA",
    "SPLITS",
    "check_storage",
    "checkpoint_prefix",
    "config_hash",
    "dataset_name",
    "fetch_dir",
    "latest_stored_checkpoint",
    "local_digest",
    "manifest_digest",
    "protocol_record",
    "publish_dataset",
    "publish_dir",
    "publish_eval",
    "read_dataset",
    "read_eval_report",
    "restore_checkpoint",
    "storage_uri_for",
    "sync_checkpoint",
]
