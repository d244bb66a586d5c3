"""Is a config's reward usable on its data? What `essaflow check-config` asks of `eval.reward` before anything runs.

1. The reward resolves and imports, its signature takes (completion, problem) or (completion, reference), and its
   source matches the digest the config was read with (the Judge checks all three as it is built).
2. The fields it requires (`problem.fields["name"]` anywhere in its file: literal names, not ones computed at run
   time; `.get("name")` reads one it can do without) are columns of the data: a field no row has is an error
   naming it. A built-in reward's fields hold the type it takes, every row read (code_tests' `tests`: Python text,
   not a number or a list), and code_tests' tests compile (prose is no test): else an error naming the rows.
3. The first rows' reference answers, scored as completions, reach `eval.correct_threshold`: rows that do not are
   a warning naming them (a reward that rejects the reference answer is usually a bug, or an answer column in
   another format than the completions); rows where it raises, too. A reward that gives no score at all (a value
   that is no finite number, a timeout, `sys.exit`, `os._exit` or a crash, output past the cap) is one error at the
   first row it does so: the next rows would only repeat it, each at the cost of a deadline. For code_tests, the
   first rows below the threshold are run again alone to say why (past eval.sandbox's limits, what they raised):
   when every reference ran past the limits, that is an error naming them, not a warning about the answers.

Data on the hub or in S3 is not read here (check-config stays offline): steps 2 and 3 then say they were skipped.
"""

from __future__ import annotations

import ast

from essaflow.checks.findings import Findings
from essaflow.data.config import DataConfig
from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig
from essaflow.judging.judge import Judge, RewardError, judge_for
from essaflow.judging.reward_ref import RewardRef, RewardRefError

OFFLINE_SOURCES = ("synthetic", "file", "reasoning_gym", "humaneval")
"""data.source values read without a network: the reward is tried on their first rows."""


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


def check_reward(eval_cfg: EvalConfig, data: DataConfig, rows: int = 20,
                 read: list[Problem] | None = None) -> Findings:  # fmt: skip
    """The reward of `eval_cfg` against the first `rows` problems of `data` (steps 1-3 of the module doc);
    `read`: data's problems, read already (by the data's own check)."""
    out = Findings()
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
        every = read if read is not None else read_problems(data).problems
    except (DataError, OSError, ValueError):  # the data check reports the data's own errors
        return out
    problems = every[:rows]
    missing = sorted(fields_required(judge.ref) - {k for p in problems for k in p.fields})
    if missing:
        have = sorted({k for p in problems for k in p.fields}) or "none"
        out.problems.append(f"eval.reward {name}: reads problem.fields {missing}, which the data "
                            f"({data.path or data.source}) has no column for (its fields: {have})")  # fmt: skip
        return out
    wrong = _wrong_types(judge, name, every) or _tests_not_python(judge, name, every)
    if wrong:
        out.problems.append(wrong)
        return out
    problem, notes = _score_references(judge, name, problems)
    out.notes.extend(notes)
    out.problems.extend([problem] if problem else [])
    return out


#: the fields a built-in reward reads, each with the type it must hold when a row has it and what that is (the
#: reward's own check calls any other value missing)
FIELD_TYPES: dict[str, dict[str, tuple[type, str]]] = {
    "code_tests": {
        "tests": (str, "Python text (assert lines, or a check function and its call)"),
        "prelude": (str, "Python text (what runs before the program)"),
    },
}
_KINDS = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}


def _wrong_types(judge: Judge, name: str, problems: list[Problem]) -> str | None:
    """An error naming the rows (every row read) whose field a built-in reward reads holds another type than the
    one it takes: code_tests' `tests` as a number or a list."""
    if judge.ref.kind != "builtin":
        return None
    for key, (kind, takes) in FIELD_TYPES.get(judge.ref.function, {}).items():
        values = [(i, p.id, p.fields.get(key)) for i, p in enumerate(problems)]
        bad = [(i, pid, type(v)) for i, pid, v in values if v is not None and not isinstance(v, kind)]
        if bad:
            shown = "; ".join(f"row {i} (id {pid!r}): {_KINDS.get(t, t.__name__)}" for i, pid, t in bad[:5])
            more = f"; ... {len(bad) - 5} more" if len(bad) > 5 else ""
            return (f"eval.reward {name}: problem.fields[{key!r}] must be {takes}, and {len(bad)} row(s) hold "
                    f"another type ({shown}{more}): give it as one string in every row")  # fmt: skip
    return None


def _runs_code(judge: Judge) -> bool:
    return judge.ref.kind == "builtin" and judge.ref.function == "code_tests"


def _tests_not_python(judge: Judge, name: str, problems: list[Problem]) -> str | None:
    """code_tests: an error naming the rows (every row read) whose `tests` field does not compile as Python (prose,
    say), which no completion could pass. Compiled only, never run."""
    if not _runs_code(judge):
        return None
    from essaflow.sandbox.code_tests import syntax_problem

    bad = [(i, p, why) for i, p in enumerate(problems) if (why := syntax_problem(str(p.fields.get("tests", ""))))]
    if not bad:
        return None
    shown = "; ".join(f"row {i} (id {p.id!r}): {why}" for i, p, why in bad[:5])
    return (f"eval.reward {name}: problem.fields['tests'] is no Python in {len(bad)} row(s) ({shown}"
            f"{f'; ... {len(bad) - 5} more' if len(bad) > 5 else ''}): give Python that raises when a solution is "
            "wrong (assert lines, or a check function and its call); no completion can pass those rows")  # fmt: skip


#: code_tests' rows below the threshold run again alone to say why: this many (each one snippet in the sandbox)
EXPLAINED = 3


def _why_code_failed(judge: Judge, name: str, low: list[tuple[int, Problem, str]], tried: int) -> str | None:
    """code_tests: add to the first rows in `low` why their reference answer failed (it ran past the sandbox's
    limits, what it raised), so that a limit too tight is not taken for wrong answers. An error naming the limits
    when every reference tried failed and each one explained ran past them."""
    from essaflow.sandbox.code_tests import shared_pool, why_not_passed

    pool = shared_pool(judge.sandbox)
    kinds = []
    for k, (i, p, said) in enumerate(low[:EXPLAINED]):
        kind, words = why_not_passed(p.answer, str(p.fields["tests"]), str(p.fields.get("prelude") or ""), pool)
        kinds.append(kind)
        low[k] = (i, p, f"{said} ({words})")
    if len(low) < tried or any(k != "timeout" for k in kinds):
        return None
    cfg = pool.cfg
    return (f"eval.reward {name}: every one of the first {tried} reference answers, run with its tests, ran past "
            f"the sandbox's limits (eval.sandbox.timeout_s={cfg.timeout_s:g} s, eval.sandbox.cpu_s={cfg.cpu_s}): "
            "raise them (or give references that end): every completion would be stopped and score 0")  # fmt: skip


def _second(judge: Judge) -> str:
    return "problem" if judge.with_problem or judge.batch else "reference"


def _score_references(judge: Judge, name: str, problems: list[Problem]) -> tuple[str | None, list[str]]:
    """(an error, notes): the error when the reward gives no score at all on a reference (step 3); a note that the
    first reference answers reach the threshold, or a warning naming the rows that do not."""
    low: list[tuple[int, Problem, str]] = []
    for i, p in enumerate(problems):
        try:
            reward = judge.score([p.answer], [p]).rewards[0]
        except RewardError as e:
            if e.kind != "raised":  # no score at all: every row would say the same, each after a deadline
                return (f"eval.reward {name}: no score for row {i} (id {p.id!r}), its reference answer judged as a "
                        f"completion: {e.detail}"), []  # fmt: skip
            low.append((i, p, f"raised: {str(e)[:160]}"))
            continue
        if reward < judge.threshold:
            low.append((i, p, f"{reward:g}"))
    if low and _runs_code(judge):
        stopped = _why_code_failed(judge, name, low, len(problems))
        if stopped:
            return stopped, []
    if not low:
        return None, [f"eval.reward {name}: the first {len(problems)} reference answers all reach "
                      f"eval.correct_threshold={judge.threshold:g}"]  # fmt: skip
    shown = "; ".join(f"row {i} (id {p.id!r}): {said}" for i, p, said in low[:10])
    shown += f"; ... {len(low) - 10} more" if len(low) > 10 else ""
    return None, [f"warning: eval.reward {name}: {len(low)} of the first {len(problems)} reference answers score "
                  f"below eval.correct_threshold={judge.threshold:g} when judged as completions: {shown}"]  # fmt: skip
