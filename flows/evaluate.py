"""pass@k of a registered model version (by alias, e.g. the current champion) with the standard protocol."""

from __future__ import annotations

from prefect import flow
from pydantic import BaseModel, ConfigDict

from essaflow import tracking
from essaflow.config import DataConfig, EvalConfig, PipelineConfig, SamplingConfig
from essaflow.refs import EvalRef
from tasks.data import prepare_dataset
from tasks.evaluation import evaluate_registered
from tasks.run import mark_failed, open_run, tracked


class EvaluateParams(BaseModel):
    """Which registered model to evaluate, on what data, with which protocol."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model_name: str = "tiny-arith"
    """Registered model name (the pipeline name)."""
    alias: str = "champion"
    """Alias to evaluate: champion, challenger, or any alias you set."""
    data: DataConfig = DataConfig()
    """Dataset to evaluate on (its eval split); the same config as training gives the same held-out problems."""
    eval: EvalConfig = EvalConfig()
    """pass@k protocol."""
    sampling: SamplingConfig = SamplingConfig()
    """Generation settings."""
    storage_uri: str = PipelineConfig().storage_uri
    """Artifact root for the report (the default yields to ESSAFLOW_STORAGE_URI)."""
    tracking_uri: str | None = None
    """MLflow tracking URI; None uses MLFLOW_TRACKING_URI or the local sqlite file."""


@flow(name="evaluate", on_failure=[mark_failed], on_crashed=[mark_failed])
def evaluate_model(params: EvaluateParams = EvaluateParams()) -> EvalRef:
    """Evaluate models:/<model_name>@<alias>; the report goes to storage and to an MLflow run."""
    config = PipelineConfig(
        name=params.model_name,
        method="none",
        data=params.data,
        eval=params.eval,
        sampling=params.sampling,
        storage_uri=params.storage_uri,
        tracking_uri=params.tracking_uri,
    )
    run = open_run(config)
    dataset = prepare_dataset(params.data, run.storage_uri)
    # config.eval: eval.reward=auto resolved from the data (the pipeline config does it)
    report = evaluate_registered(params.model_name, params.alias, dataset, config.eval, params.sampling, run)
    tracking.finish_run(tracked(run))
    return report


if __name__ == "__main__":
    print(evaluate_model().model_dump_json(indent=2))
