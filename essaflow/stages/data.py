"""The dataset stage: the sources read, validated, filtered and split (essaflow/data/prepare.py), then published as
Parquet addressed by content (essaflow/artifacts/datasets.py), with the snapshot that was read. Never imports
prefect; the model stack (torch) is imported only when the token cap needs the model's tokenizer."""

from __future__ import annotations

import logging

from essaflow.artifacts import dataset_name, publish_dataset
from essaflow.config import DataConfig, ModelConfig
from essaflow.data.config import HeldOutSourceConfig
from essaflow.data.prepare import prepare_data
from essaflow.refs import DatasetRef
from essaflow.storage import open_store
from essaflow.timing import Timer

log = logging.getLogger(__name__)


def publish_run_data(
    data: DataConfig, storage_uri: str, held_out: HeldOutSourceConfig | None = None, model: ModelConfig | None = None
) -> DatasetRef:
    """Source (and the held-out source, eval.data) -> Problems -> filters -> sft/train/eval Parquet in
    datasets/<name>/<content hash>/. model: whose tokenizer data.max_prompt_tokens counts with."""
    timer, tokenizer = Timer(), None
    with timer.part("compute"):
        if data.max_prompt_tokens is not None:
            from essaflow.model.loading import token_cap_tokenizer  # torch: only when the cap needs it

            tokenizer = token_cap_tokenizer(model, data)
        prepared = prepare_data(data, held_out, tokenizer)
    with timer.part("storage"):
        store = open_store(storage_uri)
        ref = publish_dataset(store, dataset_name(data), prepared.splits, data, prepared.snapshot, prepared.filtered)
    files = sum(len(s["files"]) for s in prepared.snapshot["sources"])
    log.info(
        "dataset %s %s at %s; snapshot %s (%d file(s)); left out: %s; dropped by filters: %s",
        ref.hash, ref.sizes, ref.uri, prepared.snapshot["digest"], files, ref.excluded, ref.filtered,
    )  # fmt: skip
    return ref.model_copy(update={"stage": "prepare_dataset", "timings": timer.timings()})
