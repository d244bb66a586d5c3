"""Progress of a long stage: a Prefect progress artifact in the UI, log lines, and an optional terminal listener.

The CLI registers a listener (rich progress bars) when it runs a flow in its own process; under a worker nobody
listens and the UI's progress artifact is the display.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

Listener = Callable[[str, float, float, str], None]
LISTENERS: list[Listener] = []


def notify(stage: str, done: float, total: float, note: str = "") -> None:
    for listener in list(LISTENERS):
        listener(stage, done, total, note)


class StageProgress:
    """Percent complete of one stage, throttled to about one update per `every_s` seconds."""

    def __init__(self, stage: str, total: int, every_s: float = 5.0):
        # each update is a call to Prefect's API from inside the stage; the terminal's bars still see every step
        self.stage, self.total, self.every_s = stage, max(int(total), 1), every_s
        self._last = 0.0
        self._artifact = create_progress_artifact(0.0, key=f"{stage.replace('_', '-')}-progress", description=stage)
        notify(stage, 0, self.total)

    def update(self, done: int, note: str = "") -> None:
        now = time.monotonic()
        notify(self.stage, done, self.total, note)
        if done < self.total and now - self._last < self.every_s:
            return
        self._last = now
        pct = round(100.0 * min(done, self.total) / self.total, 1)
        update_progress_artifact(self._artifact, pct, description=f"{self.stage}: {done}/{self.total} {note}".strip())
        get_run_logger().info("%s %d/%d %s", self.stage, done, self.total, note)
