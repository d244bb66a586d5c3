"""The compare config: one task spec and SFT start shared by every method, methods x seeds, one training budget.

    name: compare-tiny            # the MLflow experiment; the parent run holds one child run per method and seed
    task: {data: ..., model: ..., sampling: ..., eval: ..., sft: ..., essa: ..., grpo: ...}   # a pipeline config
    methods:
      - {name: essa, method: essa}
      - {name: grpo, method: fgrpo, set: {grpo.gamma: 0}}
      - {name: fgrpo-g1, method: fgrpo, set: {grpo.gamma: 1.0}}
    seeds: [0, 1, 2]              # each method's own seed (essa.seed / grpo.seed); the SFT start stays one
    budget_s: 75                  # training wall seconds per method and seed (essa/grpo.time_budget_s)

The task may start from a pipeline preset: `task: {extends: tiny-essa.yaml, ...}` (relative to the compare file's
folder) takes that preset and merges the task's own keys on top, as a preset's top-level `extends:` does
(essaflow/config.py). A reward file the compare file names (`task.eval.reward`, or `eval.reward` in a method's
`set`) is relative to its folder too. Every arm's pipeline config is built and validated when the compare config
loads, so a bad override fails before any compute, naming the method and the field.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from essaflow.config import (
    PipelineConfig,
    apply_overrides,
    apply_values,
    parse_config,
    read_yaml_tree,
    resolve_extends,
    reward_file_from,
)
from essaflow.config_base import ConfigError, StrictConfig
from essaflow.judging.reward_ref import absolute_ref
from essaflow.methods import METHODS, TrainedMethodName, method_of

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


class MethodSpec(StrictConfig):
    """One method of the comparison: a trainer and the settings it changes on the shared task."""

    name: str
    """Short id in run names, the report and the JSON line (lowercase letters, digits, '-'), e.g. fgrpo-g1."""
    method: TrainedMethodName
    """The trainer: essa, or fgrpo for the GRPO family (GRPO is fgrpo with grpo.gamma=0; DAPO and CISPO are
    grpo.loss=dapo|cispo)."""
    set: dict[str, Any] = {}
    """Dotted overrides on the task config for this method only, e.g. {"grpo.gamma": 0.5, "grpo.loss": "dapo"}."""

    @field_validator("name")
    @classmethod
    def _short_id(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} must be 1-40 lowercase letters, digits or '-', starting with a letter or digit")
        return v

    @field_validator("set")
    @classmethod
    def _trainer_not_in_set(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The trainer is `method:`; one in `set` would train without the budget and seed given to `method`'s
        section (a `set: {method: fgrpo}` on an essa method ran F-GRPO with no time budget)."""
        trainer = [value for key, value in v.items() if str(key).strip() == "method"]
        if trainer:
            raise ValueError(f"method {trainer[0]!r} is this method's trainer: give it as `method:` beside `set`, "
                             "not inside it")  # fmt: skip
        return v


class ProjectionInputs(StrictConfig):
    """What the report's scaling projection takes besides the run's measured costs (docs/scaling.md)."""

    bandwidth_gbs: float = Field(50.0, gt=0)
    """GB/s per GPU of the links the collectives use."""
    gpus: list[int] = [1, 2, 4, 8, 16, 32, 64, 128]
    """GPU counts of the projection table."""
    essa: str | None = None
    """Method (name) whose costs stand for ESSA; None: the first essa method."""
    grpo: str | None = None
    """Method (name) whose costs stand for GRPO; None: the first fgrpo method with grpo.gamma=0, else the first
    fgrpo method."""


@dataclass(frozen=True)
class Arm:
    """One training run of the comparison: a method with one seed."""

    method: str
    """MethodSpec.name."""
    seed: int
    config: PipelineConfig

    @property
    def name(self) -> str:
        return f"{self.method}-s{self.seed}"


class CompareConfig(StrictConfig):
    """Several methods from one SFT start on one task, each with several seeds and the same training budget."""

    name: str = "compare"
    """The comparison's name: the MLflow experiment of the parent and child runs."""
    task: PipelineConfig = PipelineConfig(method="none")
    """The task every method shares: data, reward, template, eval protocol (eval.samples_per_problem is the n of
    pass@k), the SFT warm start, storage and tracking; its essa and grpo sections are the methods' defaults.
    method must be none: the methods come from `methods`."""
    methods: list[MethodSpec] = Field(min_length=1)
    """The methods, in the report's order."""
    seeds: list[int] = Field([0, 1, 2], min_length=1)
    """Seeds of each method's search or rollouts (essa.seed / grpo.seed). The SFT start is one, for all."""
    budget_s: float = Field(75.0, gt=0)
    """Training wall seconds per method and seed (held-out checks left out): each trainer stops at the first
    generation/step boundary past it (essa/grpo.time_budget_s); essa.generations and grpo.steps stay caps."""
    projection: ProjectionInputs = ProjectionInputs()
    """Inputs of the scaling projection section."""

    @model_validator(mode="before")
    @classmethod
    def _task_without_method(cls, data: Any) -> Any:
        """A task given without `method` is method none (PipelineConfig's own default is essa)."""
        if isinstance(data, dict) and isinstance(data.get("task"), dict) and "method" not in data["task"]:
            data = {**data, "task": {**data["task"], "method": "none"}}
        return data

    @model_validator(mode="after")
    def _arms_valid(self) -> CompareConfig:
        if method_of(self.task).trains:
            raise ValueError(f"task.method must be none (the methods come from `methods`), got {self.task.method!r}")
        names = [m.name for m in self.methods]
        if len(set(names)) != len(names):
            raise ValueError(f"method names must be unique, got {names}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be unique, got {self.seeds}")
        for key in ("essa", "grpo"):
            chosen = getattr(self.projection, key)
            if chosen is not None and chosen not in names:
                raise ValueError(f"projection.{key}: no method named {chosen!r} (methods: {names})")
        self.arms()  # every arm's config validates now, before compute
        return self

    def arm_config(self, spec: MethodSpec, seed: int) -> PipelineConfig:
        """The pipeline config of `spec` with `seed`: the task, the method's overrides, its seed and the budget."""
        tree = {**self.task.model_dump(mode="json"), "name": self.name, "method": spec.method}
        section = METHODS.get(spec.method).section  # where its trainer reads its seed and time budget
        forced = {f"{section}.seed": seed, f"{section}.time_budget_s": self.budget_s}
        try:
            return parse_config(apply_values(tree, {**spec.set, **forced}))
        except ConfigError as err:
            raise ValueError(f"method {spec.name!r}: {err}") from None

    def arms(self) -> list[Arm]:
        """Every (method, seed) run, method by method."""
        return [Arm(m.name, s, self.arm_config(m, s)) for m in self.methods for s in self.seeds]

    def spec(self, name: str) -> MethodSpec:
        return next(m for m in self.methods if m.name == name)


def load_compare_config(path: str | Path, overrides: list[str] | None = None) -> CompareConfig:
    """A compare YAML file with dotted overrides (`--set budget_s=30`, `--set task.eval.samples_per_problem=16`)."""
    tree = read_yaml_tree(path, "compare config")
    folder = Path(path).resolve().parent
    if isinstance(tree.get("task"), dict):  # its reward file and its own `extends:`, relative to the compare file
        reward_file_from(tree["task"], folder)
        tree["task"] = resolve_extends(tree["task"], path, (Path(path).resolve(),))
    _method_rewards_from(tree.get("methods"), folder)
    return parse_config(apply_overrides(tree, overrides or []), CompareConfig)


def _method_rewards_from(methods: Any, folder: Path) -> None:
    """A method's `set: {eval.reward: my.py:fn}`, written in the compare file, is relative to its folder too."""
    for method in methods if isinstance(methods, list) else []:
        sets = method.get("set") if isinstance(method, dict) else None
        for key, value in sets.items() if isinstance(sets, dict) else []:
            if str(key).strip() == "eval.reward" and isinstance(value, str):
                with contextlib.suppress(ValueError):  # malformed: the arm's validation names it
                    sets[key] = absolute_ref(value, folder)
