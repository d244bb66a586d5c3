"""What a training method is to the pipeline: one object per method, asked instead of branching on its name.

The pipeline config names a method (`method: essa`); `essaflow.methods.method_of(cfg)` gives its object, and every
stage asks that object what differs between methods: the config section it trains with, its trainer, the label and
tags its results carry, what its stages load ahead, how its progress rows read, the devices and notes
check-config reports, and the figures the compare report's projection needs. Each method subclasses
:class:`Method` and is registered once in `essaflow/methods/__init__.py`. Never imports prefect, torch or a trainer at
module level: a trainer is imported when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from essaflow.config import section_trajectory

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig
    from essaflow.trainer_io import TrainResult

Trainer = Callable[..., "TrainResult"]
"""`trainer(cfg, splits, sft_dir, out_dir, checkpoint_dir=, on_metrics=, on_checkpoint=) -> TrainResult`."""


class Method:
    """A training method as the pipeline sees it. The defaults are those of a method that trains nothing."""

    name: str = ""
    """The config's `method:` value."""
    section: str | None = None
    """The pipeline config section it trains with (None: it trains nothing)."""
    command: str | None = None
    """`essaflow <command>` runs it as a job without Prefect (None: no such command)."""
    preset: str = "tiny.yaml"
    """The preset in configs/ that `essaflow demo --method <name>` runs."""
    projection: str | None = None
    """The latency model that prices it in the compare report's scaling projection: essa or grpo
    (essaflow/projection/); None: none does."""
    plans_memory: bool = False
    """check-config makes a per-rank memory plan for it when its workers give gpu_memory_gib
    (essaflow/checks/memory_plan.py)."""

    @property
    def trains(self) -> bool:
        """Whether it trains after the SFT warm start (method none: the SFT adapter is the result)."""
        return self.section is not None

    def settings(self, cfg: PipelineConfig) -> Any:
        """Its section of `cfg` (ESSAConfig, GRPOConfig)."""
        if self.section is None:
            raise ValueError(f"method {self.name} has no config section")
        return getattr(cfg, self.section)

    def trainer(self) -> Trainer:
        """Its training function, imported now (each trainer brings its own stack)."""
        raise ValueError(f"method {self.name!r} has no trainer")

    def preload(self) -> None:
        """Import what its stages will need, ahead of them (`essaflow.stages.preload`): its trainer."""
        if self.trains:
            self.trainer()

    def label(self, cfg: PipelineConfig) -> str:
        """The variant as results show it: 'ESSA(es, accuracy)', 'F-GRPO(gamma=0.5)', 'SFT only'."""
        raise NotImplementedError

    def tags(self, cfg: PipelineConfig) -> dict[str, str]:
        """What every reported result carries about how it was obtained: {"method_label"}, plus what the method
        adds (ESSA: the fitness kind)."""
        return {"method_label": self.label(cfg)}

    def params(self, cfg: PipelineConfig) -> dict[str, str]:
        """Derived settings logged beside the config's own as MLflow params (dotted keys)."""
        return {}

    def trajectory(self, cfg: PipelineConfig) -> dict[str, Any]:
        """The trajectory-marked fields its training depends on, as {dotted key: value}: what a checkpoint records
        and a resume must find unchanged (marks on the fields, `config_base`)."""
        if self.section is None:
            return {}
        return section_trajectory(cfg, self.section)

    def planned_steps(self, cfg: PipelineConfig) -> int:
        """Generations or optimizer steps its training runs at most (0: it trains nothing)."""
        return 0

    def progress(self, row: dict[str, Any]) -> str:
        """The method's own figures of a metrics row, for a progress line ("" when the row has none)."""
        return ""

    def devices(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        """(setting, device) pairs its training computes on besides model.device, where they run on this machine
        (a Ray cluster's nodes are checked by the cluster preflight instead)."""
        return []

    def notes(self, cfg: PipelineConfig) -> list[str]:
        """`note:` lines for settings of its section that run but may not do what their author meant."""
        return []

    def allreduce_bytes(self, cfg: PipelineConfig, trainable_bytes: float) -> float:
        """Bytes its ranks all-reduce per rollout step, from the trainable bytes its rows record (0: none)."""
        return 0.0

    def projection_settings(self, cfg: PipelineConfig) -> dict[str, int]:
        """What the projection's latency model needs that its metrics rows do not record
        (essaflow/projection/measured.py)."""
        return {}

    def __repr__(self) -> str:
        return f"<method {self.name}>"
