"""A failed pipeline run as output: which stage failed, with which error, and how to resume it.

Every task's retry condition and failure hook record here the error of each failed attempt, so the report names
what failed first (a checkpoint upload to a dying S3 server) rather than what the last retry tripped over first
(the dataset read of an attempt that started while the server was still down). The CLI prints the record as the
job's last JSON line; the flow's failure hook logs the same line and tags the MLflow run with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from essaflow.secrets import scrub

#: flow run id -> failures in the order they happened (one per failed task run)
_FAILURES: dict[str, list[StageFailure]] = {}
#: flow run id -> the pipeline run id it works on (the flow run id, or the run it resumes)
RUN_IDS: dict[str, str] = {}


@dataclass
class StageFailure:
    """One failed task run: its first error, its last one, and how many attempts it made."""

    stage: str
    first: str
    last: str = ""
    attempts: int = 1
    final: bool = False
    """The task run failed for good (a failed attempt that a retry then fixed stays False)."""
    resumable: bool = True
    """False when its last error is bad input (tasks.retry.BAD_INPUT): a resume would fail alike, none is offered."""
    task_run_id: str = field(default="", repr=False)

    @property
    def error(self) -> str:
        """The first error; the last attempt's too when it differs (e.g. S3 still down when the retry started)."""
        if self.last and self.last != self.first:
            retries = f"{self.attempts - 1} retr{'y' if self.attempts == 2 else 'ies'}"
            return f"{self.first} (then {retries}; the last: {self.last})"
        return self.first


def describe(exc: BaseException) -> str:
    """`Type: message`, one line, credentials masked."""
    return scrub(f"{type(exc).__name__}: {exc}".strip().replace("\n", " "))


def record(task_run: Any, exc: BaseException | None, message: str = "") -> StageFailure:
    """Note a failed attempt of `task_run` (from the retry condition or the failure hook)."""
    text = describe(exc) if exc is not None else scrub(message)
    if task_run is None:  # called outside a task run (a direct call in a test): nothing to attach it to
        return StageFailure("", text)
    runs = _FAILURES.setdefault(str(task_run.flow_run_id), [])
    for failure in runs:
        if failure.task_run_id == str(task_run.id):
            # the failure hook sees the error the retry condition already noted for the final attempt
            if task_run.run_count > failure.attempts:
                failure.attempts, failure.last = task_run.run_count, text
            return failure
    failure = StageFailure(task_run.name, text, attempts=max(1, task_run.run_count), task_run_id=str(task_run.id))
    runs.append(failure)
    return failure


def on_task_failure(task: Any, task_run: Any, state: Any) -> None:
    """Task failure hook (after the last attempt): record the final error."""
    try:
        state.result()
    except BaseException as e:  # the state's exception is what we record
        record(task_run, e).final = True
    else:
        record(task_run, None, state.message or "failed").final = True


def first_failure(flow_run_id: str) -> StageFailure | None:
    """The first task run that failed for good in this flow run (the stage to report)."""
    return next((f for f in _FAILURES.get(str(flow_run_id), []) if f.final), None)


def pop(flow_run_id: str) -> tuple[StageFailure | None, str | None]:
    """(first failure, pipeline run id) of a finished flow run, forgotten afterwards."""
    failure = first_failure(flow_run_id)
    _FAILURES.pop(str(flow_run_id), None)
    return failure, RUN_IDS.pop(str(flow_run_id), None)


def failure_line(error: str, stage: str, run_id: str | None, resume: str | None) -> dict[str, Any]:
    """What a failed job prints as its last JSON line (cli.common.fail prints the same keys)."""
    return {"error": error, "stage": stage, "run_id": run_id, "resume": resume}


class StripTracebacks(logging.Filter):
    """Console handler filter: the one-line message stays, the traceback goes (it is in the run's log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class OneTraceback(logging.Filter):
    """Flow-run logger filter: the failed task already logged its traceback; the flow's re-raise adds none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Encountered exception during execution"):
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("prefect.flow_runs").addFilter(OneTraceback())
