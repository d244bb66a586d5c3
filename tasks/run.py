"""Opening and closing a pipeline run (essaflow/runs/opening.py, essaflow/runs/closing.py), the summary artifacts in
the Prefect UI, and the hooks that journal each stage (essaflow/runs/journal.py) and report a failed run."""

from __future__ import annotations

import json
import logging
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run

from essaflow.config import PipelineConfig
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, ModelRef, PipelineResult, RegisteredRef, RunRef
from essaflow.runs import lease
from essaflow.runs.closing import close_pipeline_run, end_run
from essaflow.runs.failure import fail_tracked_run, failed_run
from essaflow.runs.journal import Journal
from essaflow.runs.opening import FlowRun, open_pipeline_run
from essaflow.runs.summary import FinishedRun, passk_rows, summary_markdown
from essaflow.secrets import safe_uri, scrub
from tasks.failures import masked_errors
from tasks.progress import notify
from tasks.retry import retry_policy


class _QuietStageHook(logging.Filter):
    """Prefect logs two INFO lines per hook call; record_stage runs after every stage and says nothing useful."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'record_stage'" not in record.getMessage()


logging.getLogger("prefect.task_runs").addFilter(_QuietStageHook())


def record_stage(task: Any, task_run: Any, state: Any) -> None:
    """Task completion hook: the stage's wall time including retries and orchestration (0 for a cache hit), into
    the flow run's journal; the terminal's stage counter moves."""
    start, end = task_run.start_time, task_run.end_time or state.timestamp
    wall = (end - start).total_seconds() if start and end else 0.0
    record = Journal(str(task_run.flow_run_id)).stage_done(task_run.name, wall, state.name)
    notify("pipeline", len(record.stages), max(record.planned, len(record.stages)), task_run.name)


def this_flow_run() -> FlowRun:
    """The flow run this task runs in, as the run's tags name it."""
    return FlowRun(flow_run.get_id(), flow_run.get_name() or "", flow_run.get_flow_name() or "",
                   flow_run.get_flow_run_ui_url() or "")  # fmt: skip


@task(name="open_run", task_run_name="open_run", **retry_policy(retries=0), on_completion=[record_stage])
@masked_errors
def open_run(config: PipelineConfig, resume: str | None = None, stages: int = 0) -> RunRef:
    """Preflight before any compute, the run's lease and record, then the MLflow run (essaflow/runs/opening.py).

    The whole pipeline config: it is the run's record (the MLflow params, and what a resume is checked against).
    `resume`: a run id, or `last` (the newest failed run of this pipeline). `stages`: how many stages the flow
    reports (the terminal's stage counter). No retries: an unreachable server or a rejected credential is reported
    at once, naming the URI."""
    flow = this_flow_run()
    journal = Journal(str(flow.id))
    journal.plan(stages)
    opened = open_pipeline_run(config, resume, flow, journal)
    log, run = get_run_logger(), opened.run
    for crashed in opened.crashed:
        log.warning("run %s: its process died (heartbeat stale); marked FAILED in MLflow", crashed)
    if opened.resumed:
        log.info("resuming run %s from its newest checkpoint", run.run_id)
    if opened.cluster:
        log.info("Ray cluster can hold the training workers: %s", opened.cluster)
    where = run.mlflow_url or safe_uri(run.tracking_uri)
    log.info("run %s: storage %s, MLflow run %s at %s", run.run_id, run.storage_uri, run.mlflow_run_id, where)
    return run


@task(name="close_run", task_run_name="close_run", **retry_policy(backoff_s=1))
@masked_errors
def close_run(
    run: RunRef, dataset: DatasetRef, base: ModelRef, sft: AdapterRef, adapter: AdapterRef, before: EvalRef,
    after: EvalRef, model: RegisteredRef, start: EvalRef | None = None,
) -> PipelineResult:  # fmt: skip
    """Summary artifacts (markdown with links, pass@k before/after table), final MLflow tags, run finished; the
    run's result, with each stage's wall time from the flow run's journal (then forgotten)."""
    done = FinishedRun(run, dataset, base, sft, adapter, before, after, model, start)
    create_table_artifact(passk_rows(before, after, start), key="passk-before-after",
                          description="pass@k of the base, the SFT start and the tuned adapter")  # fmt: skip
    create_markdown_artifact(summary_markdown(done), key="finetune-summary", description=run.run_id)
    journal = Journal(str(run.flow_run_id))
    result = close_pipeline_run(done, journal.read())
    journal.remove()
    return result


def end_evaluation(run: RunRef) -> None:
    """An evaluation run ends: its MLflow run FINISHED, its lease given back, its journal forgotten."""
    end_run(run)
    Journal(str(run.flow_run_id)).remove()


def mark_failed(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow hook: a failed or crashed pipeline run leaves its MLflow run FAILED (with the failure as a tag), not
    RUNNING forever, and ends its log with the failure's JSON line (the CLI prints the same one). A crashed run's
    hook runs in the worker, outside any run context: the logger is the flow run's by its id, not get_run_logger."""
    log = flow_run_logger(flow_run, flow)
    params = flow_run.parameters or {}
    cfg = params.get("config") or params.get("params") or {}
    record = Journal(str(flow_run.id)).read()
    failed = failed_run(record, scrub(state.message or state.name), resumable_flow=flow.name == "finetune")
    log.error("%s", json.dumps(failed.line()))
    lease.release(failed.run_id)  # a resume may start at once; a process that dies instead leaves it to expire
    try:
        fail_tracked_run(cfg.get("tracking_uri") if isinstance(cfg, dict) else None, failed.run_id or str(flow_run.id),
                         failed.reason)  # fmt: skip
    except Exception as e:  # the failure may be MLflow itself; the flow's own error is what matters
        log.warning("could not mark the MLflow run failed: %s", scrub(str(e)))
