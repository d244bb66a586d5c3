"""Dataset preparation: load, validate and split the problems, publish them as Parquet addressed by content."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

from prefect import task

from essaflow import tracking
from essaflow.artifacts import config_hash
from essaflow.config import DataConfig, ModelConfig
from essaflow.data.config import HeldOutSourceConfig
from essaflow.data.fingerprint import READER_VERSION, data_snapshot_digest
from essaflow.model.identity import model_identity
from essaflow.refs import DatasetRef, RunRef
from essaflow.stages.data import publish_run_data
from essaflow.storage import MANIFEST, StorageError, open_store
from essaflow.tracking.datasets import log_dataset_inputs
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage

DATASET_FORMAT = 1  # bump when the stored layout changes, so old cache entries stop matching


def same_data_config(context: Any, parameters: dict[str, Any]) -> str:
    """Cache key: the same data config and the same source bytes, written to the same store, are the same dataset.

    The sources' content (essaflow.data.data_snapshot_digest: file digests, S3 ETags, hub commit) is in the key, so a
    file changed in place is a new key and a fresh dataset; unchanged bytes are a cache hit. A source that cannot
    be fingerprinted now (unreachable, missing) gets a key of its own, so the task runs and reports the problem.

    Unless the cached dataset has vanished from the store (a wiped bucket, a fresh server): then the key is new for
    this once, the task runs and republishes the identical content-addressed artifact, and the old entry is valid
    again.
    """
    data: DataConfig = parameters["data"]
    held_out: HeldOutSourceConfig | None = parameters.get("held_out")
    model: ModelConfig | None = parameters.get("model")
    data_key = config_hash(data) if held_out is None else f"{config_hash(data)}.{config_hash(held_out)}"
    if data.max_prompt_tokens is not None and model is not None:  # the token filter's tokenizer shapes the dataset
        try:
            tokenizer = hashlib.sha256(json.dumps(model_identity(model)).encode()).hexdigest()[:12]
        except Exception:  # unresolvable now: a key of its own, so the task runs and reports the problem
            tokenizer = f"unread-{uuid.uuid4().hex[:8]}"
        data_key = f"{data_key}-{tokenizer}"
    where = hashlib.sha256(parameters["storage_uri"].encode()).hexdigest()[:12]
    try:
        content = data_snapshot_digest(data, held_out)
    except Exception:  # the task itself reads the source and raises the clear error
        content = f"unread-{uuid.uuid4().hex[:8]}"
    key = f"prepare-dataset-v{DATASET_FORMAT}.{READER_VERSION}-{data_key}-{content}-{where}"
    store = getattr(context, "result_store", None)
    if store is not None and store.exists(key) and not _still_stored(store, key):
        return f"{key}-republish-{uuid.uuid4().hex[:8]}"
    return key


def _still_stored(result_store: Any, key: str) -> bool:
    try:
        ref = result_store.read(key).result
        return open_store(ref.uri).exists(MANIFEST)
    except StorageError as e:  # unreachable now: keep the entry; the next stage reports the problem
        return e.kind not in ("missing_bucket", "missing_object")
    except Exception:  # an unreadable cache record is as good as none
        return False


@task(
    name="prepare_dataset",
    task_run_name="prepare_dataset",
    cache_key_fn=same_data_config,
    cache_expiration=timedelta(days=30),
    persist_result=True,
    result_serializer="json",
    **retry_policy(retries=3),
    on_completion=[record_stage],
)
@masked_errors
def prepare_dataset(
    data: DataConfig,
    storage_uri: str,
    held_out: HeldOutSourceConfig | None = None,
    model: ModelConfig | None = None,
) -> DatasetRef:
    """Source (and the held-out source, eval.data) -> normalized Problems -> filters -> sft/train/eval Parquet in
    datasets/<name>/<content hash>/, with the snapshot that was read (essaflow/stages/data.py). model: whose
    tokenizer data.max_prompt_tokens counts with."""
    return publish_run_data(data, storage_uri, held_out, model)


@task(name="record_dataset", task_run_name="record_dataset", **retry_policy(retries=3))
@masked_errors
def record_dataset(run: RunRef, dataset: DatasetRef) -> None:
    """The snapshot the run read, as the MLflow run's dataset inputs (with its digest) and tags."""
    log_dataset_inputs(tracking.tracked(run), dataset)
