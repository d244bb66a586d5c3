"""Data only: load, validate, split and publish a dataset (a cache hit when the same config was prepared)."""

from __future__ import annotations

from prefect import flow

from essaflow.artifacts import check_storage, storage_uri_for
from essaflow.config import DataConfig, ModelConfig, PipelineConfig
from essaflow.refs import DatasetRef
from tasks.data import prepare_dataset


@flow(name="prepare")
def prepare(
    data: DataConfig = DataConfig(), storage_uri: str = PipelineConfig().storage_uri, model: ModelConfig | None = None
) -> DatasetRef:
    """Prepare the dataset named by `data` in the store at `storage_uri` (`model`: whose tokenizer
    data.max_prompt_tokens counts with)."""
    root = check_storage(storage_uri_for(storage_uri))
    return prepare_dataset(data, root, model=model)


if __name__ == "__main__":
    print(prepare().model_dump_json(indent=2))
