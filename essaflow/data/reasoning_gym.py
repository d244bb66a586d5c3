"""reasoning-gym as a source: its procedural tasks become Problems, and its own verifiers judge them.

PyPI `reasoning-gym` (Apache-2.0) generates 100+ tasks by seed, each with a `score_answer(answer, entry)` that
grades an answer against the entry (question, answer, metadata). A task, or a weighted mix of tasks, is one source
(`data.reasoning_gym`): each task makes its share of `size` problems from `data.seed` with its own config keys.

A problem keeps everything its verifier needs in its fields, so the reward can judge it in any process:
`rg_task` (the task's name), `rg_config` (its config keys) and `rg_entry` (the entry: question, answer, metadata,
made JSON-safe). Its solution is the entry's worked solution where the task writes one (`metadata.answer_cot`, as
gsm_symbolic does), else none, and SFT trains on the answer (docs/tasks.md). Splits are by content, as for every
source.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from essaflow.data.config import ReasoningGymConfig
from essaflow.data.errors import DataFileError
from essaflow.data.schema import Problem

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _json_safe(value: Any) -> Any:
    """The entry as JSON holds it (tuples as lists, sets as sorted lists, other objects as their text)."""
    return json.loads(json.dumps(value, default=lambda o: sorted(o, key=str) if isinstance(o, set) else str(o)))


def task_names() -> list[str]:
    """Every task the installed reasoning-gym knows."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise DataFileError("data.source=reasoning_gym reads PyPI `reasoning-gym`, which is not installed: "
                            "pip install reasoning-gym (make install does)") from None  # fmt: skip
    return sorted(DATASETS)


def _dataset(name: str, config: dict[str, Any], size: int, seed: int):
    import reasoning_gym

    if name not in task_names():
        raise DataFileError(f"data.reasoning_gym.tasks: unknown task {name!r}; reasoning-gym has {task_names()}")
    try:
        return reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError, IndexError) as e:  # an unknown or impossible config key
        raise DataFileError(
            f"data.reasoning_gym.tasks[{name}].config {config}: reasoning-gym refuses it: {type(e).__name__}: {e}"
        ) from None


def reasoning_gym_problems(cfg: ReasoningGymConfig, seed: int) -> list[Problem]:
    """The distinct problems among `cfg.size` drawn over `cfg.tasks` (each its weighted share) from `seed`.

    reasoning-gym draws with replacement, and a small task repeats itself (1-digit sums: 200 questions in all): a
    question asked again is dropped (the first copy kept), so no problem weighs twice in training or evaluation."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for task, size in zip(cfg.tasks, cfg.sizes()):
        for index, entry in enumerate(_dataset(task.name, task.config, size, seed)):
            problem = _problem(task.name, task.config, index, _json_safe(entry))
            if problem.problem_key() not in seen:
                seen.add(problem.problem_key())
                problems.append(problem)
    return problems


def _problem(name: str, config: dict[str, Any], index: int, entry: dict[str, Any]) -> Problem:
    answer = entry.get("answer")
    cot = (entry.get("metadata") or {}).get("answer_cot")
    return Problem(
        id=f"{name}-{index}",
        prompt=entry["question"],
        answer="" if answer is None else str(answer),
        solution=cot if isinstance(cot, str) and cot.strip() else None,
        metadata={"source": "reasoning_gym", "task": name},
        fields={"rg_task": name, "rg_config": _json_safe(config), "rg_entry": entry},
    )


def answer_candidates(completion: str) -> list[str]:
    """The answers a completion gives, in the order tried (docs/rewards.md, "reasoning_gym"):

    - with an `<answer>...</answer>` tag (reasoning-gym's own format): the last tag's content, and nothing else;
    - without one: its last non-empty line (trailing '.' dropped), then the last number it writes.
    """
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return [tags[-1].strip()]
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    candidates = [lines[-1].rstrip(".").strip()] if lines else []
    numbers = _NUMBER.findall(completion)
    if numbers:
        candidates.append(numbers[-1])
    return candidates


@functools.lru_cache(maxsize=64)
def _verifier(name: str, config_json: str):
    """A dataset of the task (its score_answer), built once per process and config."""
    return _dataset(name, json.loads(config_json), 1, 0)


def score(completion: str, fields: dict[str, Any]) -> float:
    """The task's own graded score of the completion's answer: the best over `answer_candidates`'s candidates."""
    verifier = _verifier(fields["rg_task"], json.dumps(fields.get("rg_config") or {}, sort_keys=True))
    entry = fields["rg_entry"]
    scores = (float(verifier.score_answer(answer=a, entry=entry)) for a in answer_candidates(completion))
    return max(scores, default=0.0)
