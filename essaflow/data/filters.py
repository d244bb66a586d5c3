"""The paper's data filters beside the row checks: prompts too long in the model's tokens, and duplicate problems
whose copies disagree on the answer (FGRPO-v2 Tab. 5: DeepScaleR, 40,315 -> 39,202 problems).

Both drop and count; the counts go to the dataset's info.json, its reference (`filtered`) and the run's JSON line.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from essaflow.data.config import DataConfig
from essaflow.data.schema import Problem
from essaflow.generation.prompt_format import prompt_ids

log = logging.getLogger(__name__)


@dataclass
class Filtered:
    """The problems kept, and how many each filter dropped (by the config field that asked for it)."""

    problems: list[Problem]
    dropped: dict[str, int] = field(default_factory=dict)


def _same_problem(prompt: str) -> str:
    """Copies of one problem differ at most in whitespace."""
    return " ".join(prompt.split())


def drop_conflicting_duplicates(problems: list[Problem]) -> tuple[list[Problem], int]:
    """Every copy of a prompt that appears with two or more different answers is dropped (which one is right is
    unknowable); duplicates that agree are kept as they are (they share a split: the split hashes content)."""
    answers: dict[str, set[str]] = defaultdict(set)
    for p in problems:
        answers[_same_problem(p.prompt)].add(p.answer.strip())
    kept = [p for p in problems if len(answers[_same_problem(p.prompt)]) == 1]
    return kept, len(problems) - len(kept)


def drop_long_prompts(problems: list[Problem], tokenizer: Any, cfg: DataConfig) -> tuple[list[Problem], int]:
    """Prompts over data.max_prompt_tokens, counted as the model sees them (template, chat template, BOS)."""
    assert cfg.max_prompt_tokens is not None
    ids = prompt_ids(tokenizer, [p.prompt for p in problems], cfg.prompt_format())
    kept = [p for p, row in zip(problems, ids) if len(row) <= cfg.max_prompt_tokens]
    return kept, len(problems) - len(kept)


def filter_problems(problems: list[Problem], cfg: DataConfig, tokenizer: Any = None) -> Filtered:
    """Apply the filters cfg asks for; a token cap without a tokenizer is a ValueError naming the field."""
    result = Filtered(problems)
    if cfg.conflicting_duplicates == "drop":
        result.problems, result.dropped["conflicting_duplicates"] = drop_conflicting_duplicates(result.problems)
    if cfg.max_prompt_tokens is not None:
        if tokenizer is None:
            raise ValueError("data.max_prompt_tokens needs the model's tokenizer (model.name_or_path)")
        result.problems, result.dropped["max_prompt_tokens"] = drop_long_prompts(result.problems, tokenizer, cfg)
    for name, n in result.dropped.items():
        if n:
            log.warning("dropped %d problem(s) by data.%s", n, name)
    if not result.problems:
        raise ValueError(f"no problems left after the data filters ({result.dropped})")
    return result
