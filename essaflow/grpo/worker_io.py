"""What a GRPO worker is given (`WorkerInputs`) and what it tells the driver: typed events, from rank 0 only except
`RankStarted` (every rank, again after a group restart). In process the events go straight to the driver; on Ray
Train through a queue (`distributed.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from essaflow.grpo.worker_group import WorkerInfo

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig
    from essaflow.data.schema import Problem
    from essaflow.judging.judge import JudgeSpec


@dataclass(frozen=True)
class WorkerInputs:
    """What every worker trains from: the config, the problems, the start adapter and where results go."""

    cfg: PipelineConfig
    train: list[Problem]
    eval_problems: list[Problem]
    start: Path
    out_dir: Path
    checkpoint_dir: Path | None
    judge: JudgeSpec | None = None
    """The reward as shipped (its source by value); None: read from cfg.eval (a worker on the driver's machine)."""


@dataclass(frozen=True)
class RankStarted:
    """A rank started (again, after a group restart) on a Ray node."""

    rank: int
    world_size: int
    node: str


@dataclass(frozen=True)
class Resumed:
    """Training continues from the checkpoint of this step."""

    step: int


@dataclass(frozen=True)
class StepDone:
    """Metrics of one finished rollout step (a StepMetrics row)."""

    row: dict[str, Any]


@dataclass(frozen=True)
class CheckpointWritten:
    """A complete checkpoint directory was committed."""

    path: str


@dataclass(frozen=True)
class Finished:
    """Training ended; the result is in out_dir/output_name(grpo.parameters)."""

    steps: int
    wall_s: float
    bytes_per_update: float
    resumed_from: int | None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    sharding: str = "ddp"
    memory_per_rank: dict[str, int] = field(default_factory=dict)
    """Bytes of params, grads, optimizer (and their total) one rank holds, the largest over ranks."""


WorkerEvent = RankStarted | Resumed | StepDone | CheckpointWritten | Finished
Emit = Callable[[WorkerEvent], None]
RunWorker = Callable[[WorkerInputs, WorkerInfo, Emit], None]
"""The loop one worker runs (`loop.run_worker`): its inputs, its place in the group, where its events go."""
