"""pass@k of the base model, a tuned adapter, or a registered model version (essaflow/stages/evaluation.py)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, RunRef
from essaflow.stages.evaluation import (
    eval_table,
    evaluate_alias,
    evaluate_on_eval_split,
    evaluate_start,
    evaluate_tuned,
)
from essaflow.tracking import resolve_tracking_uri
from essaflow.tracking.aliases import registered_version
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage


@task(name="evaluate", task_run_name="evaluate-{label}", **retry_policy(), on_completion=[record_stage])
@masked_errors
def evaluate_pass_at_k(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    adapter: AdapterRef | None, label: str, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k on the eval split (same samples budget and seed for every label), stored under runs/<id>/eval/.

    data: the prompt formatting; model: the base the adapter (None: the base alone) sits on."""
    ref = evaluate_on_eval_split(data, model, sampling, eval_cfg, dataset, adapter, label, run)
    create_table_artifact(eval_table(ref), key=f"passk-{label}", description=f"pass@k of {label} ({ref.uri})")
    get_run_logger().info("%s: %s", label, {k: round(v, 3) for k, v in ref.summary.items()})
    return ref


@task(name="evaluate_start", task_run_name="evaluate-sft_start", **retry_policy(), on_completion=[record_stage])
@masked_errors
def evaluate_start_point(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    start: AdapterRef, base: EvalRef, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the adapter training starts from, so SFT's part and the method's part are reported apart."""
    ref = evaluate_start(data, model, sampling, eval_cfg, dataset, start, base, run)
    create_table_artifact(eval_table(ref), key="passk-sft-start", description=f"pass@k of the SFT start ({ref.uri})")
    return ref


@task(name="evaluate_tuned", task_run_name="evaluate-tuned", **retry_policy(), on_completion=[record_stage])
@masked_errors
def evaluate_tuned_adapter(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    tuned: AdapterRef, start: EvalRef, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the tuned adapter (method none: the start's report, not computed twice)."""
    ref = evaluate_tuned(data, model, sampling, eval_cfg, dataset, tuned, start, run)
    create_table_artifact(eval_table(ref), key="passk-tuned", description=f"pass@k of tuned ({ref.uri})")
    get_run_logger().info("tuned: %s", {k: round(v, 3) for k, v in ref.summary.items()})
    return ref


@task(
    name="evaluate_registered",
    task_run_name="evaluate-{model_name}-{alias}",
    **retry_policy(),
    on_completion=[record_stage],
)
@masked_errors
def evaluate_registered(
    model_name: str, alias: str, dataset: DatasetRef, eval_cfg: EvalConfig, sampling: SamplingConfig, run: RunRef
) -> EvalRef:
    """pass@k of `models:/<name>@<alias>` with our protocol; report in runs/<id>/eval/<name>-<alias>/."""
    ref = evaluate_alias(model_name, alias, dataset, eval_cfg, sampling, run)
    create_table_artifact(eval_table(ref), key="passk-registered", description=f"pass@k of {model_name}@{alias}")
    return ref


@task(name="check_registered", task_run_name="check-{model_name}-{alias}", **retry_policy(retries=0))
@masked_errors
def check_registered(model_name: str, alias: str, tracking_uri: str | None) -> str:
    """The version `models:/<name>@<alias>` names, before a run opens or a dataset is prepared: a model or alias
    the registry lacks fails at once (TrackingError, no retry), naming what it holds."""
    return registered_version(resolve_tracking_uri(tracking_uri), model_name, alias)
