"""The evaluation stages: pass@k of the base or a trained adapter on the run's eval split, and of a registered
version (by alias); each report stored under runs/<id>/eval/<label>/ with the protocol it was measured with, and
logged to the run's MLflow run. Never imports prefect; the model stack (torch) is imported only where a stage
evaluates.
"""

from __future__ import annotations

from typing import Any

from essaflow import tracking
from essaflow.artifacts import fetch_dir, protocol_record, publish_eval, read_dataset, read_eval_report
from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.judging.evaluation import EvalReport
from essaflow.judging.registered import evaluate_version
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, RunRef
from essaflow.storage import open_store
from essaflow.timing import Timer


def eval_table(ref: EvalRef) -> list[dict[str, Any]]:
    """A report's summary as table rows (metric, value to 4 places), the truncated share last."""
    rows = [{"metric": k, "value": round(v, 4)} for k, v in ref.summary.items()]
    return [*rows, {"metric": "truncated_share", "value": round(ref.truncated_share, 4)}]


def evaluate_on_eval_split(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    adapter: AdapterRef | None, label: str, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the base (adapter None) or a trained policy on it, on the eval split (the same samples budget and
    seed for every label); data: the prompt formatting."""
    timer = Timer()
    with timer.part("storage"):
        splits = read_dataset(dataset)
        adapter_dir = fetch_dir(adapter.uri, adapter.digest) if adapter is not None else None
    with timer.part("compute"):
        from essaflow.judging.model_eval import evaluate_adapter, evaluate_output  # torch: where a stage evaluates

        fmt = data.prompt_format()
        if adapter is None or adapter_dir is None:
            report = evaluate_adapter(model, None, splits.eval, eval_cfg, sampling, fmt)
        else:
            report = evaluate_output(model, adapter_dir, adapter.output_kind, splits.eval, eval_cfg, sampling, fmt)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        log_report(run, label, report)
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})


def log_report(run: RunRef, label: str, report: EvalReport) -> None:
    """The report as the run's MLflow metrics and artifacts; a CLI job's run (no MLflow run) logs nothing."""
    if run.mlflow_run_id:
        tracking.log_eval(tracking.tracked(run), label, report)


def evaluate_start(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    start: AdapterRef, base: EvalRef | None, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the adapter training starts from (the SFT start, or the adapter at adapter_uri), under the base's
    protocol: what the method adds is tuned minus this, what SFT added is this minus the base. An untrained start
    (no SFT steps: a fresh LoRA, B = 0) is the base itself, and its report is the base's (base None: a CLI job,
    which scores no base, evaluates it)."""
    if base is not None and start.kind == "sft" and start.training.steps == 0:
        return base.model_copy(update={"stage": "evaluate-sft_start", "timings": {}, "reused": True})
    return evaluate_on_eval_split(data, model, sampling, eval_cfg, dataset, start, "sft_start", run)


def evaluate_tuned(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    tuned: AdapterRef, start: EvalRef, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the tuned adapter. Method none's result is the start itself (the same bytes, the same protocol and
    seed): its report is published and logged again as the tuned one instead of being computed twice."""
    if tuned.kind != "none" or start.reused:
        return evaluate_on_eval_split(data, model, sampling, eval_cfg, dataset, tuned, "tuned", run)
    timer = Timer()
    with timer.part("storage"):
        report = read_eval_report(start)
        ref = publish_eval(open_store(run.storage_uri), run, "tuned", report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        log_report(run, "tuned", report)
    return ref.model_copy(update={"stage": "evaluate-tuned", "timings": timer.timings()})


def evaluate_alias(
    model_name: str, alias: str, dataset: DatasetRef, eval_cfg: EvalConfig, sampling: SamplingConfig, run: RunRef
) -> EvalRef:
    """pass@k of `models:/<name>@<alias>` with this protocol, formatted as its version formats prompts."""
    timer, label = Timer(), f"{model_name}-{alias}"
    with timer.part("tracking"):
        version = str(tracking.client(run.tracking_uri).get_model_version_by_alias(model_name, alias).version)
    with timer.part("storage"):
        splits = read_dataset(dataset)
    with timer.part("compute"), tracking.downloaded_version(run.tracking_uri, model_name, version) as m:
        report = evaluate_version(m, splits.eval, eval_cfg, sampling)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracking.tracked(run), label, report)
        tracking.set_tags(tracking.tracked(run), {"essaflow.evaluated_model": f"models:/{model_name}/{version}"})
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})
