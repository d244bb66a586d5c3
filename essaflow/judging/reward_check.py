"""Is a config's reward usable on its data? What `essaflow check-config` asks of `eval.reward` before anything runs.

1. The reward resolves and imports, its signature takes (completion, problem) or (completion, reference), and its
   source matches the digest the config was read with (the Judge checks all three as it is built).
2. The fields it requires (`problem.fields["name"]` anywhere in its file: literal names, not ones computed at run
   time; `.get("name")` reads one it can do without) are columns of the data: a field no row has is an error
   naming it.
3. The first rows' reference answers, scored as completions, reach `eval.correct_threshold`: rows that do not are
   a warning naming them (a reward that rejects the reference answer is usually a bug, or an answer column in
   another format than the completions); rows where it raises, too. A reward that gives no score at all (a value
   that is no finite number, a timeout, `sys.exit`, `os._exit` or a crash, output past the cap) is one error at the
   first row it does so: the next rows would only repeat it, each at the cost of a deadline.

Data on the hub or in S3 is not read here (check-config stays offline): steps 2 and 3 then say they were skipped.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from essaflow.data.config import DataConfig
from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig
from essaflow.judging.judge import Judge, RewardError, judge_for
from essaflow.judging.reward_ref import RewardRef, RewardRefError

OFFLINE_SOURCES = ("synthetic", "file", "reasoning_gym", "humaneval")
"""data.source values read without a network: the reward is tried on their first rows."""


@dataclass
class RewardCheck:
    """``problems``: errors, one line each naming eval.reward; ``notes``: what was checked, and warnings."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def fields_required(ref: RewardRef) -> set[str]:
    """Field names the reward's file subscripts as literals (`<x>.fields["name"]`); a builtin's are registered."""
    if ref.kind == "builtin":
        from essaflow.judging.rewards import REWARDS

        return set(REWARDS.meta(ref.function).get("fields", ()))
    names: set[str] = set()
    for node in ast.walk(ast.parse(ref.source)):
        key = node.slice if isinstance(node, ast.Subscript) and _is_fields(node.value) else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
    return names


def _is_fields(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "fields"


def check_reward(eval_cfg: EvalConfig, data: DataConfig, rows: int = 20) -> RewardCheck:
    """The reward of `eval_cfg` against the first `rows` problems of `data` (steps 1-3 of the module doc)."""
    out = RewardCheck()
    try:
        judge = judge_for(eval_cfg)
    except (RewardRefError, RewardError, OSError, ImportError) as e:
        out.problems.append(f"eval.reward: {e}")
        return out
    name = judge.ref.ref if judge.ref.kind == "builtin" else f"{judge.ref.origin}:{judge.ref.function}"
    if data.source not in OFFLINE_SOURCES:
        out.notes.append(f"eval.reward {name}: imports and takes (completion, {_second(judge)}); its fields and "
                         f"reference answers not tried (data.source={data.source} is not read offline)")  # fmt: skip
        return out
    from essaflow.data import DataError, read_problems

    try:
        problems = read_problems(data).problems[:rows]
    except (DataError, OSError, ValueError):  # the data check reports the data's own errors
        return out
    missing = sorted(fields_required(judge.ref) - {k for p in problems for k in p.fields})
    if missing:
        have = sorted({k for p in problems for k in p.fields}) or "none"
        out.problems.append(f"eval.reward {name}: reads problem.fields {missing}, which the data "
                            f"({data.path or data.source}) has no column for (its fields: {have})")  # fmt: skip
        return out
    problem, notes = _score_references(judge, name, problems)
    out.notes.extend(notes)
    out.problems.extend([problem] if problem else [])
    return out


def _second(judge: Judge) -> str:
    return "problem" if judge.with_problem or judge.batch else "reference"


def _score_references(judge: Judge, name: str, problems: list[Problem]) -> tuple[str | None, list[str]]:
    """(an error, notes): the error when the reward gives no score at all on a reference (step 3); a note that the
    first reference answers reach the threshold, or a warning naming the rows that do not."""
    low: list[str] = []
    for i, p in enumerate(problems):
        try:
            reward = judge.score([p.answer], [p]).rewards[0]
        except RewardError as e:
            if e.kind != "raised":  # no score at all: every row would say the same, each after a deadline
                return (f"eval.reward {name}: no score for row {i} (id {p.id!r}), its reference answer judged as a "
                        f"completion: {e.detail}"), []  # fmt: skip
            low.append(f"row {i} (id {p.id!r}): raised: {str(e)[:160]}")
            continue
        if reward < judge.threshold:
            low.append(f"row {i} (id {p.id!r}): {reward:g}")
    if not low:
        return None, [f"eval.reward {name}: the first {len(problems)} reference answers all reach "
                      f"eval.correct_threshold={judge.threshold:g}"]  # fmt: skip
    shown = "; ".join(low[:10]) + (f"; ... {len(low) - 10} more" if len(low) > 10 else "")
    return None, [f"warning: eval.reward {name}: {len(low)} of the first {len(problems)} reference answers score "
                  f"below eval.correct_threshold={judge.threshold:g} when judged as completions: {shown}"]  # fmt: skip
