"""Per-step training metrics to MLflow in batches: one call every few seconds, not one per step, and once per step.

A retried or resumed training recomputes the steps after its checkpoint; those already in the MLflow run are
skipped (the recomputed values are the same: a run is a function of its config and seed), so every metric holds
one point per step however many attempts it took.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from essaflow import tracking


class BufferedStepMetrics:
    """Collects metric rows and logs them with `tracking.log_step_metrics` at most every `every_s` seconds.

    Use as a context manager: what is still buffered is logged on exit, also when training raised (what was
    measured is kept; the training error stays the one reported).
    """

    def __init__(self, run: tracking.TrackedRun, every_s: float = 10.0, prefix: str = "train"):
        # each call is a commit synced to disk on a local sqlite store: every 10 s keeps MLflow's charts current
        # without paying one per short generation
        self.run, self.every_s, self.prefix = run, every_s, prefix
        self.pending: list[dict[str, Any]] = []
        self._flushed = time.monotonic()
        # steps the run already holds (an earlier attempt, or the run this one resumes) are not logged again
        self.logged: dict[str, int] = tracking.logged_steps(run, prefix)

    def add(self, row: dict[str, Any]) -> None:
        self.pending.append(row)
        if time.monotonic() - self._flushed >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            tracking.log_step_metrics(self.run, self.pending, self.prefix, self.logged)
        self.pending.clear()
        self._flushed = time.monotonic()

    def __enter__(self) -> BufferedStepMetrics:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()
            return
        with suppress(Exception):  # the trainer's error is the one to report
            self.flush()
