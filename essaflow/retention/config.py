"""What `essaflow gc` keeps: how many runs of each pipeline, in which store, against which registry."""

from __future__ import annotations

from pydantic import Field

from essaflow.config import PipelineConfig
from essaflow.config_base import StrictConfig
from essaflow.secrets import NO_PASSWORD_IN_FORM


class RetentionConfig(StrictConfig):
    """Retention of one artifact store (docs/retention.md)."""

    keep_runs: int = Field(5, ge=1)
    """Runs kept whole per pipeline (by `name`): the newest N by the time each run was opened. An older run keeps
    only what a registered model version references (its adapter, eval reports, record); its checkpoints go, and
    all of it goes when no version references it (a failed run, or a version deleted from the registry)."""
    storage_uri: str = PipelineConfig().storage_uri
    """Artifact root to clean (file:// or s3://); the default yields to ESSAFLOW_STORAGE_URI, as a pipeline's does."""
    tracking_uri: str | None = Field(None, json_schema_extra=NO_PASSWORD_IN_FORM)
    """MLflow tracking URI whose model registry says what must be kept; None uses MLFLOW_TRACKING_URI or the local
    sqlite file. gc deletes nothing when the registry cannot be read. No password here in the deployment's form
    (refused; the worker's MLFLOW_TRACKING_URI holds it)."""
