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
from essaflow.data.errors import DataError
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


def conflicting_groups(problems: list[Problem]) -> list[list[Problem]]:
    """The copies of each prompt that appears with two or more different answers, a group per prompt, in order."""
    copies: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        copies[_same_problem(p.prompt)].append(p)
    return [group for group in copies.values() if len({p.answer.strip() for p in group}) > 1]


def describe_conflicts(groups: list[list[Problem]], shown: int = 3) -> str:
    """`2 prompts come with different answers (5 rows; ids a, b, c and 2 more)`: the rows to look at."""
    ids = [p.id for group in groups for p in group]
    named = ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
    return f"{len(groups)} prompt(s) come with different answers ({len(ids)} rows; ids {named})"


def drop_conflicting_duplicates(problems: list[Problem]) -> tuple[list[Problem], int]:
    """Every copy of a prompt that appears with two or more different answers is dropped (which one is right is
    unknowable); duplicates that agree are kept as they are (they share a split: the split hashes content)."""
    conflicting = {id(p) for group in conflicting_groups(problems) for p in group}
    kept = [p for p in problems if id(p) not in conflicting]
    return kept, len(problems) - len(kept)


#: what a run and check-config say of conflicting copies kept by default
KEPT_CONFLICTS = (
    "kept, each copy judged by its own answer (data.conflicting_duplicates=keep): set "
    "data.conflicting_duplicates=drop to drop them"
)


def drop_long_prompts(problems: list[Problem], tokenizer: Any, cfg: DataConfig) -> tuple[list[Problem], int]:
    """Prompts over data.max_prompt_tokens, counted as the model sees them (template, chat template, BOS)."""
    assert cfg.max_prompt_tokens is not None
    ids = prompt_ids(tokenizer, [p.prompt for p in problems], cfg.prompt_format())
    kept = [p for p, row in zip(problems, ids) if len(row) <= cfg.max_prompt_tokens]
    return kept, len(problems) - len(kept)


def filter_problems(problems: list[Problem], cfg: DataConfig, tokenizer: Any = None) -> Filtered:
    """Apply the filters cfg asks for; a token cap without a tokenizer is a ValueError naming the field."""
    result = Filtered(problems)
    if cfg.conflicting_duplicates == "keep" and (groups := conflicting_groups(problems)):
        log.warning("%s: %s", describe_conflicts(groups), KEPT_CONFLICTS)
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
        raise DataError(f"no problems left after the data filters ({result.dropped})")  # no retry can help
    return result
