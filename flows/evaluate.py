"""pass@k of a registered model version (by alias, e.g. the current champion) with the standard protocol."""

from __future__ import annotations

from prefect import flow

from essaflow.config import ModelConfig, PipelineConfig, SFTConfig
from essaflow.refs import EvalRef
from flows.parameters import EvaluateParams, without_uri_passwords
from tasks.data import prepare_dataset
from tasks.evaluation import check_registered, evaluate_pass_at_k, evaluate_registered
from tasks.run import end_evaluation, mark_failed, open_run

EVALUATION_STAGES = ("open_run", "prepare_dataset", "evaluate-<model>-<alias>")
"""The stages that report to the progress counter."""


@flow(name="evaluate", on_failure=[mark_failed], on_crashed=[mark_failed])
def evaluate_model(params: EvaluateParams = EvaluateParams()) -> EvalRef:
    """Evaluate models:/<model_name>@<alias>, or a base model as it is (params.base_model); the report goes to
    storage and to an MLflow run.

    Args:
        params: the model and alias, and configs/tiny.yaml's data, eval and sampling; what you change overrides them.
    """
    params = without_uri_passwords(params)
    config = PipelineConfig(
        name=params.model_name,
        method="none",
        model=params.base_model or ModelConfig(),  # the run records (and its preflight checks) the model evaluated
        sft=SFTConfig(enabled=False),  # an evaluation trains nothing
        data=params.data,
        eval=params.eval,
        sampling=params.sampling,
        storage_uri=params.storage_uri,
        tracking_uri=params.tracking_uri,
    )
    base = params.base_model
    if base is None:
        check_registered(params.model_name, params.alias, params.tracking_uri)  # a missing model: before anything else
    run = open_run(config, None, len(EVALUATION_STAGES))
    dataset = prepare_dataset(params.data, run.storage_uri, params.eval.data)
    # config.eval: eval.reward=auto resolved from the data (the pipeline config does it)
    if base is None:
        report = evaluate_registered(params.model_name, params.alias, dataset, config.eval, params.sampling, run)
    else:
        report = evaluate_pass_at_k(params.data, base, params.sampling, config.eval, dataset, None, "base", run)
    end_evaluation(run)
    return report


if __name__ == "__main__":
    print(evaluate_model().model_dump_json(indent=2))
