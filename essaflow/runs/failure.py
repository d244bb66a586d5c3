"""A failed pipeline run as output: which stage failed, with which error, and how to resume it.

Every failed attempt's error is journalled (essaflow/runs/journal.py), so the report names what failed first (a
checkpoint upload to a dying S3 server) rather than what the last retry tripped over first (the dataset read of an
attempt that started while the server was still down). The CLI prints the report as the job's last JSON line; the
flow's failure hook logs the same line and tags the MLflow run FAILED with the reason. Never imports prefect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from essaflow import tracking
from essaflow.runs.journal import FlowRecord
from essaflow.secrets import scrub


def describe(exc: BaseException) -> str:
    """`Type: message`, one line, credentials masked."""
    return scrub(f"{type(exc).__name__}: {exc}".strip().replace("\n", " "))


def failure_line(error: str, stage: str, run_id: str | None, resume: str | None) -> dict[str, Any]:
    """What a failed job prints as its last JSON line (cli.common.fail prints the same keys)."""
    return {"error": error, "stage": stage, "run_id": run_id, "resume": resume}


@dataclass(frozen=True)
class FailedRun:
    """What a failed flow run reports."""

    error: str
    stage: str
    """The task run that failed for good first, or `flow` when no task did (the flow itself failed)."""
    run_id: str | None
    """The pipeline run id, once the run's lease was taken (None before)."""
    resume: str | None
    """How to continue the run (None when a resume would fail alike, or the flow cannot resume)."""

    @property
    def reason(self) -> str:
        """The MLflow run's failure tag: `stage: error`."""
        return f"{self.stage}: {self.error}"

    def line(self) -> dict[str, Any]:
        return failure_line(self.error, self.stage, self.run_id, self.resume)


def failed_run(record: FlowRecord, flow_error: str, resumable_flow: bool) -> FailedRun:
    """The report of a failed flow run from its journal (`flow_error`: the flow's own error, reported when no
    stage failed for good; `resumable_flow`: the flow takes a `resume` parameter)."""
    failure = record.first_failure()
    run_id = record.run_id
    resume = None
    if run_id and resumable_flow and (failure is None or failure.resumable):
        resume = f"essaflow run <config> --resume {run_id} (or the finetune flow with parameter resume={run_id})"
    if failure is None:
        return FailedRun(flow_error, "flow", run_id, resume)
    return FailedRun(failure.error, failure.stage, run_id, resume)


def fail_tracked_run(tracking_uri: str | None, pipeline_run_id: str, reason: str) -> None:
    """The pipeline run's MLflow run FAILED with `reason` (the configured URI, else the environment's); raises when
    the server is unreachable within 2 s."""
    uri = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_tracking(uri, timeout=2.0)
    tracking.fail_run(uri, pipeline_run_id, reason)
