"""Which failures a retry can fix, and the retry policy every pipeline task declares (`**retry_policy()`).

A bad config, a malformed dataset, a missing file or object, missing credentials or a missing bucket fail the same
way every time, so they fail at once with their message; a dropped connection, a timeout or a crashed trainer gets
the task's retries. Bad input (a config, a dataset or a file that is wrong or missing) is also offered no resume.
"""

from __future__ import annotations

from typing import Any

from prefect.tasks import exponential_backoff

from essaflow.config import ConfigError
from essaflow.data import DataError
from essaflow.environment import env_number
from essaflow.judging.judge import RewardError
from essaflow.storage import StorageError
from essaflow.tracking import TrackingError
from tasks import failures

PERMANENT_STORAGE = {"missing_bucket", "missing_object", "credentials", "invalid", "conflict", "refused"}
#: the input itself is wrong (a bad config, a malformed dataset, a missing file, a reward of yours that raises, hangs
#: or returns no finite number): a resume fails alike
BAD_INPUT = (ConfigError, DataError, FileNotFoundError, RewardError)
#: raised the same way by every attempt: a retry cannot help
PERMANENT = (*BAD_INPUT, TrackingError, ImportError)


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry unless the exception says retrying cannot help (each failed attempt's error
    is journalled by tasks.failures, so the report can name the first)."""
    try:
        state.result()
    except PERMANENT as e:  # DataError: unreadable file, malformed rows
        failures.record(task_run, e)
        return False
    except StorageError as e:
        failures.record(task_run, e)
        return e.kind not in PERMANENT_STORAGE
    except Exception as e:
        failures.record(task_run, e)
        return True
    return True


def note_bad_input(task: Any, task_run: Any, state: Any) -> None:
    """Task failure hook, after failures.on_task_failure: a final error that is bad input makes the run's report
    offer no resume (a server that was down, a missing package: fixed outside the config, a resume can help)."""
    try:
        state.result()
    except BAD_INPUT as e:
        failures.record(task_run, e, resumable=False)
    except BaseException:  # any other failure stays resumable
        return


def retry_policy(retries: int = 2, backoff_s: float = 2.0) -> dict[str, Any]:
    """Prefect task options: ``retries`` attempts after the first, exponential backoff from ``backoff_s`` seconds
    with jitter (so parallel runs do not retry in step), and only for failures a retry can fix; the final failure
    is journalled for the run's report (tasks.failures).

    ``ESSAFLOW_RETRY_BACKOFF_SCALE`` (default 1), read when the tasks are defined (at import), scales every backoff:
    fault-injection tests set it low so that a run meant to fail does not sit out 15 s of waits between attempts.
    """
    scale = env_number("ESSAFLOW_RETRY_BACKOFF_SCALE")  # not a number: a ConfigError naming the variable
    return {
        "retries": retries,
        "retry_delay_seconds": exponential_backoff(backoff_factor=backoff_s * scale),
        "retry_jitter_factor": 0.5,
        "retry_condition_fn": transient_only,
        "on_failure": [failures.on_task_failure, note_bad_input],
    }
