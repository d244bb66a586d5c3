"""Which failures a retry can fix. Declared on every task as `retry_condition_fn=transient_only`.

A bad config, a malformed dataset, missing credentials or a missing bucket fail the same way every time, so they
fail at once with their message; a dropped connection, a timeout or a crashed trainer gets the task's retries.
"""

from __future__ import annotations

from typing import Any

from essaflow.config import ConfigError
from essaflow.data import BadRowsError
from essaflow.storage import StorageError
from essaflow.tracking import TrackingError

PERMANENT_STORAGE = {"missing_bucket", "credentials", "invalid", "conflict"}


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry unless the exception says retrying cannot help."""
    try:
        state.result()
    except (ConfigError, BadRowsError, TrackingError, ImportError):
        return False
    except StorageError as e:
        return e.kind not in PERMANENT_STORAGE
    except Exception:
        return True
    return True
