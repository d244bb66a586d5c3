"""The built-in synthetic tasks by name: each one's generator, the characters it writes, and the reward that judges it.

`data.synthetic.task` picks one for the data; a tiny model's recipe names one for its vocabulary and pretraining
corpus (essaflow.model.tiny), so the data and `builtin:tiny-<task>` agree on the task (docs/tasks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from essaflow.data.countdown import ALPHABET as COUNTDOWN_ALPHABET
from essaflow.data.countdown import countdown_problems
from essaflow.data.programs import ALPHABET as PROGRAMS_ALPHABET
from essaflow.data.programs import programs_problems
from essaflow.data.schema import Problem
from essaflow.data.synthetic import ALPHABET as ARITHMETIC_ALPHABET
from essaflow.data.synthetic import synthetic_problems


@dataclass(frozen=True)
class SyntheticTask:
    """One built-in task: how its problems are made and judged."""

    generate: Callable[..., list[Problem]]
    """(num_problems, *, seed, **knobs) -> distinct problems, the same for the same arguments."""
    alphabet: str
    """Every character a prompt or answer of the task holds: a character tokenizer's vocabulary."""
    reward: str
    """The registered reward that judges it (what eval.reward=auto picks)."""


TASKS: dict[str, SyntheticTask] = {
    "arithmetic": SyntheticTask(synthetic_problems, ARITHMETIC_ALPHABET, "exact_match"),
    "countdown": SyntheticTask(countdown_problems, COUNTDOWN_ALPHABET, "countdown"),
    "programs": SyntheticTask(programs_problems, PROGRAMS_ALPHABET, "code_tests"),
}


def synthetic_task(name: str) -> SyntheticTask:
    """The task registered as `name`; the error lists the known ones."""
    if name not in TASKS:
        raise ValueError(f"unknown synthetic task {name!r}; known: {sorted(TASKS)}")
    return TASKS[name]


def task_problems(name: str, num_problems: int, seed: int, knobs: dict[str, Any]) -> list[Problem]:
    """`num_problems` problems of task `name` made with its generator's `knobs` (its keyword arguments)."""
    return synthetic_task(name).generate(num_problems, seed=seed, **knobs)
