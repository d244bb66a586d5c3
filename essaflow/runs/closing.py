"""Closing a pipeline run: its final MLflow tags, the MLflow run FINISHED, the lease given back, and what the run
reports (the PipelineResult the CLI prints as its last JSON line; a SkippedRun for a run with nothing new).
Never imports prefect."""

from __future__ import annotations

import time

from essaflow import tracking
from essaflow.refs import DatasetRef, PipelineResult, RegisteredRef, RunInputs, RunRef, SkippedRun
from essaflow.runs import lease
from essaflow.runs.journal import FlowRecord
from essaflow.runs.line import stage_parts
from essaflow.runs.skip import OUTCOME_TAG, SKIPPED, SKIPPED_TAG, TRAINED
from essaflow.runs.summary import FinishedRun, data_summary
from essaflow.secrets import safe_uri


def closing_tags(dataset: DatasetRef, adapter_uri: str, model: RegisteredRef) -> dict[str, str]:
    """The MLflow run's final tags: the registered model and its aliases, the dataset and adapter, what each data
    filter dropped, and the outcome the next run's nothing-new check compares with (essaflow/runs/skip.py)."""
    return {
        "essaflow.model": model.model_uri,
        "essaflow.aliases": ",".join(model.aliases),
        "essaflow.dataset_uri": dataset.uri,
        "essaflow.adapter_uri": adapter_uri,
        **{f"essaflow.data_filtered.{name}": str(n) for name, n in dataset.filtered.items()},
        OUTCOME_TAG: TRAINED,
    }


def pipeline_result(done: FinishedRun, record: FlowRecord, now: float) -> PipelineResult:
    """What the run reports: scores, the registered version and the gate, where everything is, the training
    summary, and its time (per stage as the orchestrator recorded it; compute, storage and tracking summed over
    the stages that ran, cache hits left out)."""
    run, dataset, adapter, model = done.run, done.dataset, done.adapter, done.model
    cached = record.cached()
    reused = {ref.stage for ref in done.refs() if ref.reused}  # found in storage by content key: cached too
    parts = stage_parts(done.refs(), cached)
    return PipelineResult(
        run_id=run.run_id, before=done.before.summary, after=done.after.summary, model_name=model.name,
        sft_start=done.start.summary if done.start is not None else {},
        model_version=model.version, aliases=model.aliases, decision=model.decision, gate=model.gate,
        judged_with=done.after.judged_with,
        tracking_uri=safe_uri(run.tracking_uri), storage_uri=run.storage_uri, mlflow_run_id=run.mlflow_run_id,
        dataset_uri=dataset.uri, adapter_uri=adapter.uri, data_filtered=dataset.filtered,
        data=data_summary(dataset), training={"kind": adapter.kind, **adapter.training.model_dump()},
        stages=record.walls(), cached=sorted(cached | reused), flow_s=round(now - run.started_at, 2),
        parts={k: round(v, 2) for k, v in parts.items()},
    )  # fmt: skip


def close_pipeline_run(done: FinishedRun, record: FlowRecord) -> PipelineResult:
    """Tag and finish the MLflow run, give the lease back; the run's result."""
    result = pipeline_result(done, record, time.time())
    tracking.set_tags(tracking.tracked(done.run), closing_tags(done.dataset, done.adapter.uri, done.model))
    tracking.finish_run(tracking.tracked(done.run))
    lease.release(done.run.run_id)
    return result


def end_run(run: RunRef) -> None:
    """A run that reports nothing more (an evaluation): its MLflow run FINISHED, its lease given back."""
    tracking.finish_run(tracking.tracked(run))
    lease.release(run.run_id)


def close_skipped_run(run: RunRef, checked: RunInputs, record: FlowRecord) -> SkippedRun:
    """End a run with nothing new: its MLflow run tagged skipped with the reason and FINISHED, the lease given
    back; what it reports (its stages so far from the flow run's journal)."""
    reason = checked.skip_reason or "nothing new"
    tracking.set_tags(tracking.tracked(run), {OUTCOME_TAG: SKIPPED, SKIPPED_TAG: reason})
    tracking.finish_run(tracking.tracked(run))
    lease.release(run.run_id)
    return SkippedRun(
        reason=reason, run_id=run.run_id, same_as=checked.same_as, inputs=checked.inputs,
        mlflow_run_id=run.mlflow_run_id, tracking_uri=safe_uri(run.tracking_uri), storage_uri=run.storage_uri,
        stages=record.walls(), flow_s=round(time.time() - run.started_at, 2),
    )  # fmt: skip
