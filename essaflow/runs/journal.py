"""What a flow run's stages reported, kept on the machine that runs it: how many stages the flow has, the pipeline
run id it works on, each finished stage's wall time and final state, and each failed attempt's error.

The orchestrator's hooks (a task's completion and failure hooks, its retry condition, the flow's failure hook) run
in the flow run's process but hand each other nothing; they append to one JSON-lines file per flow run,
`<cache dir>/journal/<flow run id>.jsonl` (essaflow.storage.cache_dir), each event one line written with a single
`O_APPEND` write, and read it back as a :class:`FlowRecord`: the run's close (stage walls, cache hits), the flow's
failure hook and the CLI (the first stage that failed for good). The reader that reports the run last removes the
file; a file that no one removed (its process died, or no CLI read it) is removed once older than `KEEP_S`, when a
later flow run starts its own. Never imports prefect.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from essaflow.storage.cache_dir import cache_root

log = logging.getLogger(__name__)

KEEP_S = 7 * 24 * 3600.0
"""A journal file left behind is removed when a later flow run starts and it is older than this (a week)."""


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
    """False when its last error is bad input (a config, a dataset or a file that is wrong or missing): a resume
    would fail alike, none is offered."""
    task_run_id: str = field(default="", repr=False)

    @property
    def error(self) -> str:
        """The first error; the last attempt's too when it differs (e.g. S3 still down when the retry started)."""
        if self.last and self.last != self.first:
            retries = f"{self.attempts - 1} retr{'y' if self.attempts == 2 else 'ies'}"
            return f"{self.first} (then {retries}; the last: {self.last})"
        return self.first


@dataclass(frozen=True)
class StageWall:
    """A finished stage as the orchestrator recorded it."""

    wall_s: float
    """Wall seconds including retries and orchestration (0 for a cache hit)."""
    state: str
    """Its final state's name: Completed, Cached, ..."""


@dataclass(frozen=True)
class FlowRecord:
    """A flow run's journal, read back."""

    planned: int = 0
    """How many stages the flow reports (0: it did not say)."""
    run_id: str | None = None
    """The pipeline run id the flow works on (its flow run id, or the run it resumes)."""
    stages: dict[str, StageWall] = field(default_factory=dict)
    """Finished stages by task run name, in the order they first finished."""
    failures: list[StageFailure] = field(default_factory=list)
    """Failed task runs in the order they first failed."""

    def walls(self) -> dict[str, float]:
        """Wall seconds per finished stage."""
        return {name: s.wall_s for name, s in self.stages.items()}

    def cached(self) -> set[str]:
        """The stages answered from the task cache."""
        return {name for name, s in self.stages.items() if s.state == "Cached"}

    def first_failure(self) -> StageFailure | None:
        """The first task run that failed for good (the stage to report)."""
        return next((f for f in self.failures if f.final), None)


def fold(events: list[dict[str, Any]]) -> FlowRecord:
    """The record the events make: the last plan and run id, each stage's last finish, and per task run one
    failure (its first error; the last attempt's error and count when a later attempt failed too)."""
    planned, run_id = 0, None
    stages: dict[str, StageWall] = {}
    failures: dict[str, StageFailure] = {}
    for e in events:
        kind = e.get("event")
        if kind == "plan":
            planned = int(e["stages"])
        elif kind == "run":
            run_id = e["run_id"]
        elif kind == "stage":
            stages[e["name"]] = StageWall(float(e["wall_s"]), e["state"])
        elif kind == "failure":
            attempt, f = int(e.get("attempt", 1)), failures.get(e["task_run"])
            if f is None:
                f = failures[e["task_run"]] = StageFailure(e["stage"], e["error"], attempts=max(1, attempt),
                                                           task_run_id=e["task_run"])  # fmt: skip
            elif attempt > f.attempts:
                f.attempts, f.last = attempt, e["error"]
            f.final = f.final or bool(e.get("final"))
            f.resumable = f.resumable and e.get("resumable", True)
    return FlowRecord(planned, run_id, stages, list(failures.values()))


class Journal:
    """The journal of one flow run."""

    def __init__(self, flow_run_id: str, root: Path | None = None):
        self.root = root or cache_root() / "journal"
        self.path = self.root / f"{flow_run_id}.jsonl"

    def _append(self, event: dict[str, Any]) -> None:
        """One event, appended; a journal that cannot be written (ESSAFLOW_CACHE_DIR unwritable) is a warning, not a
        failure of its own: the run's first task names the directory, and a failure hook must not fail on it."""
        line = (json.dumps(event) + "\n").encode()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as err:
            log.warning("stage journal %s not written (%s): set ESSAFLOW_CACHE_DIR to a writable directory",
                        self.path, err.strerror or err)  # fmt: skip

    def plan(self, stages: int) -> None:
        """The flow reports `stages` stages; journals older than KEEP_S left by earlier flow runs are removed."""
        self._remove_old()
        self._append({"event": "plan", "stages": stages})

    def working_on(self, run_id: str) -> None:
        """The pipeline run id this flow run works on (only a lease holder may mark the run failed)."""
        self._append({"event": "run", "run_id": run_id})

    def stage_done(self, name: str, wall_s: float, state: str) -> FlowRecord:
        """A stage finished; the record so far (for a progress count)."""
        self._append({"event": "stage", "name": name, "wall_s": round(wall_s, 2), "state": state})
        return self.read()

    def attempt_failed(
        self, stage: str, task_run_id: str, attempt: int, error: str, *, final: bool = False, resumable: bool = True
    ) -> None:
        """An attempt of task run `task_run_id` failed with `error` (`final`: the task run failed for good;
        `resumable` False: the error is bad input)."""
        self._append({"event": "failure", "stage": stage, "task_run": task_run_id, "attempt": attempt,
                      "error": error, "final": final, "resumable": resumable})  # fmt: skip

    def read(self) -> FlowRecord:
        """The record so far (empty when nothing was journalled; a line being written is left out)."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return FlowRecord()
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return fold(events)

    def remove(self) -> None:
        """Forget the flow run (its last reader has reported it)."""
        self.path.unlink(missing_ok=True)

    def _remove_old(self) -> None:
        cutoff = time.time() - KEEP_S
        for old in self.root.glob("*.jsonl") if self.root.is_dir() else []:
            try:
                if old.stat().st_mtime < cutoff:
                    old.unlink()
            except FileNotFoundError:  # another process removed it first
                continue
