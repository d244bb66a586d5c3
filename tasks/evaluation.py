"""pass@k evaluation of the base model, a tuned adapter, or a registered model version."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from essaflow import tracking
from essaflow.artifacts import fetch_dir, publish_eval, read_dataset
from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, RunRef
from essaflow.storage import open_store
from essaflow.timing import Timer
from essaflow.training.registered import evaluate_version
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked


def _protocol(eval_cfg: EvalConfig, sampling: SamplingConfig) -> dict:
    return {"eval": eval_cfg.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json")}


def _table(ref: EvalRef) -> list[dict]:
    rows = [{"metric": k, "value": round(v, 4)} for k, v in ref.summary.items()]
    return [*rows, {"metric": "truncated_share", "value": round(ref.truncated_share, 4)}]


@task(
    name="evaluate",
    task_run_name="evaluate-{label}",
    **retry_policy(),
    on_completion=[record_stage],
)
def evaluate(
    data: DataConfig,
    model: ModelConfig,
    sampling: SamplingConfig,
    eval_cfg: EvalConfig,
    dataset: DatasetRef,
    adapter: AdapterRef | None,
    label: str,
    run: RunRef,
) -> EvalRef:
    """pass@k on the eval split (same samples budget and seed for every label), stored under runs/<id>/eval/.

    data: the prompt formatting; model: the base the adapter (None: the base alone) sits on."""
    timer = Timer()
    with timer.part("storage"):
        splits = read_dataset(dataset)
        adapter_dir = fetch_dir(adapter.uri, adapter.digest) if adapter is not None else None
    with timer.part("compute"):
        from essaflow.training.warm_start import evaluate_adapter, evaluate_output  # torch, as in tasks/data.py

        fmt = data.prompt_format()
        if adapter_dir is None:
            report = evaluate_adapter(model, None, splits.eval, eval_cfg, sampling, fmt)
        else:
            report = evaluate_output(model, adapter_dir, adapter.output_kind, splits.eval, eval_cfg, sampling, fmt)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, _protocol(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracked(run), label, report)
    create_table_artifact(_table(ref), key=f"passk-{label}", description=f"pass@k of {label} ({ref.uri})")
    get_run_logger().info("%s: %s", label, {k: round(v, 3) for k, v in ref.summary.items()})
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})


@task(
    name="evaluate_registered",
    task_run_name="evaluate-{model_name}-{alias}",
    **retry_policy(),
    on_completion=[record_stage],
)
def evaluate_registered(
    model_name: str,
    alias: str,
    dataset: DatasetRef,
    eval_cfg: EvalConfig,
    sampling: SamplingConfig,
    run: RunRef,
) -> EvalRef:
    """pass@k of `models:/<name>@<alias>` with our protocol; report in runs/<id>/eval/<name>-<alias>/."""
    timer = Timer()
    label = f"{model_name}-{alias}"
    with timer.part("tracking"):
        version = tracking.client(run.tracking_uri).get_model_version_by_alias(model_name, alias)
    with timer.part("storage"):
        splits = read_dataset(dataset)
    with timer.part("compute"):  # the download included: the version's prompt formatting, as its predict applies it
        report = evaluate_version(run.tracking_uri, model_name, str(version.version), splits.eval, eval_cfg, sampling)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, _protocol(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracked(run), label, report)
        tracking.set_tags(tracked(run), {"essaflow.evaluated_model": f"models:/{model_name}/{version.version}"})
    create_table_artifact(_table(ref), key="passk-registered", description=f"pass@k of {model_name}@{alias}")
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})
