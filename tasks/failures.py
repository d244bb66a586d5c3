"""Failed task runs into the flow run's journal (essaflow/runs/journal.py), and read back for the report.

Every task's retry condition and failure hook journal the error of each failed attempt, so the report names what
failed first rather than what the last retry tripped over (essaflow/runs/failure.py). The CLI prints the report as
the job's last JSON line; the flow's failure hook logs the same line and tags the MLflow run with the reason.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from prefect.logging.configuration import ensure_logging_setup

from essaflow.runs.failure import describe
from essaflow.runs.journal import Journal, StageFailure
from essaflow.secrets import mask_log_handlers, scrub, scrub_exception

F = TypeVar("F", bound=Callable[..., Any])


def masked_errors(fn: F) -> F:
    """Under a task's @task: an exception leaves the task with URI user-info and secret values masked along its
    chain, before Prefect turns its message into the task run's state (stored in Prefect's database, where no log
    filter reaches) and its retry condition and hooks see it."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            scrub_exception(e)
            raise

    return run  # type: ignore[return-value]


def record(
    task_run: Any, exc: BaseException | None, message: str = "", *, final: bool = False, resumable: bool = True
) -> None:
    """Journal a failed attempt of `task_run` (from the retry condition or a failure hook); `final`: the task run
    failed for good; `resumable` False: its error is bad input. Outside a task run (a direct call) nothing is kept."""
    if task_run is None:
        return
    text = describe(exc) if exc is not None else scrub(message)
    Journal(str(task_run.flow_run_id)).attempt_failed(
        task_run.name, str(task_run.id), task_run.run_count, text, final=final, resumable=resumable
    )


def on_task_failure(task: Any, task_run: Any, state: Any) -> None:
    """Task failure hook (after the last attempt): journal the final error."""
    try:
        state.result()
    except BaseException as e:  # the state's exception is what we record
        record(task_run, e, final=True)
    else:
        record(task_run, None, state.message or "failed", final=True)


def pop(flow_run_id: str) -> tuple[StageFailure | None, str | None]:
    """(first failure, pipeline run id) of a finished flow run, its journal forgotten afterwards."""
    journal = Journal(str(flow_run_id))
    flow = journal.read()
    journal.remove()
    return flow.first_failure(), flow.run_id


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
# Every record Prefect's handlers send to the API (the run's log in Prefect's database) or print has URI user-info
# and secret values masked, tracebacks included
ensure_logging_setup()
mask_log_handlers()
