"""Rewards: answer verification, plus a registry so a reward is plugged by name.

Rewards are binary (1.0 / 0.0) by default, as both papers use (FGRPO-v2 sec. 5.2 uses math-verify). A reward of
your own is named by file or module instead (essaflow.judging.reward_ref; docs/rewards.md).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from essaflow.data.answers import extract_answer
from essaflow.data.synthetic_tasks import synthetic_task
from essaflow.registry import Registry

if TYPE_CHECKING:
    from essaflow.data.schema import Problem
    from essaflow.sandbox.config import SandboxConfig

Reward = Callable[[str, str], float]
REWARDS: Registry[Reward] = Registry("reward")
register_reward = REWARDS.register
"""Decorator: make `fn(completion, reference) -> float` available as `name` in configs."""


def get_reward(name: str) -> Reward:
    """The reward registered as `name`; the error lists the known ones."""
    if name == AUTO_REWARD:
        raise ValueError(
            "eval.reward=auto is resolved from the data by the pipeline config (rewards.resolve_reward); "
            "a standalone EvalConfig needs a concrete reward such as exact_match or math_verify"
        )
    return REWARDS.get(name)


AUTO_REWARD = "auto"
"""eval.reward: pick the reward from the data (`resolve_reward`)."""


def resolve_reward(reward: str, source: str, adapter: str, task: str = "arithmetic") -> str:
    """eval.reward=auto -> the reward that matches the data: math_verify for GSM8K and MATH answers (equivalent
    forms such as 0.5 and \\frac{1}{2} agree), exact_match for plain files (answers as written), and for the
    synthetic source its task's own (`task`: exact_match, countdown, code_tests); reasoning_gym for reasoning-gym's
    tasks and code_tests for HumanEval. Any other name passes through."""
    if reward != AUTO_REWARD:
        return reward
    if source == "synthetic":
        return synthetic_task(task).reward
    if source in ("reasoning_gym", "humaneval"):
        return "reasoning_gym" if source == "reasoning_gym" else "code_tests"
    return "math_verify" if adapter in ("gsm8k", "math") else "exact_match"


@register_reward("exact_match")
def exact_match(completion: str, reference: str) -> float:
    """Arithmetic: the completion's first line, stripped, equals the reference exactly."""
    first = completion.strip().split("\n", 1)[0].strip() if completion.strip() else ""
    return 1.0 if first == reference.strip() else 0.0


@register_reward("math_verify")
def math_verify_reward(completion: str, reference: str) -> float:
    """Math: extract the final answer (\\boxed{}, then '####', then the last number) and check symbolic
    equivalence with math-verify (Hugging Face, PyPI `math-verify`; FGRPO-v2 sec. 5.2)."""
    from math_verify import parse, verify

    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    # math-verify's timeouts use signal.alarm, which only the main thread may set (Prefect tasks and Ray actors
    # call rewards from other threads): there the parse runs without one.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${reference}$", parsing_timeout=timeout)
    pred = parse(f"${answer}$", parsing_timeout=timeout)
    if not gold or not pred:
        return 1.0 if answer.strip() == reference.strip() else 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=timeout) else 0.0


@register_reward("final_number")
def final_number_reward(completion: str, reference: str) -> float:
    """Numeric: the last number of the completion equals the reference number."""
    got = extract_answer(completion)
    if got is None:
        return 0.0
    try:
        return 1.0 if float(got) == float(reference.replace(",", "")) else 0.0
    except ValueError:
        return 0.0


@register_reward("code_tests", batch=True, fields=("tests",))
def code_tests(completions: list[str], problems: list[Problem], sandbox: SandboxConfig | None = None) -> list[float]:
    """Code: each completion's program (its first fenced block, else the whole text) runs, after its problem's
    `prelude` field when it has one (HumanEval's imports and helpers) and followed by its `tests` field (Python that
    raises when the solution is wrong), in the sandbox (eval.sandbox: bubblewrap by default); 1.0 when it ran to
    its end, else 0.0. A batch reward: one pool of sandboxed workers takes them all; a program and tests already
    judged in this process are not run again (eval.sandbox.memo_size)."""
    from essaflow.sandbox import code_tests_scores, shared_memo, shared_pool

    missing = [p.id for p in problems if not isinstance(p.fields.get("tests"), str)]
    if missing:
        raise ValueError(f"code_tests needs each problem's `tests` field (Python text); missing for {missing[:5]}")
    tests = [p.fields["tests"] for p in problems]
    preludes = [str(p.fields.get("prelude") or "") for p in problems]  # optional: HumanEval's imports and helpers
    return code_tests_scores(completions, tests, shared_pool(sandbox), shared_memo(sandbox), preludes)


@register_reward("countdown", fields=("numbers", "target"))
def countdown(completion: str, problem: Problem) -> float:
    """Countdown: 1.0 when the completion's first line is an arithmetic expression over the problem's `numbers`
    (each at most once) equal to its `target`, else 0.0; any right expression counts (essaflow.judging.countdown)."""
    from essaflow.judging.countdown import verify

    numbers, target = problem.fields.get("numbers"), problem.fields.get("target")
    if not isinstance(numbers, list) or not isinstance(target, int):
        raise ValueError(f"countdown needs the problem's `numbers` (a list) and `target` (an int) fields; "
                         f"{problem.id!r} has {sorted(problem.fields)}")  # fmt: skip
    return float(verify(completion, numbers, target))


def _reasoning_gym_judged_by() -> str:
    """What besides the wrapper decides a reasoning_gym score: our answer reading and reasoning-gym's version (its
    verifiers), so a change to either is a changed protocol (the digest)."""
    import importlib.metadata

    import essaflow.data.reasoning_gym as reading

    try:
        version = importlib.metadata.version("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return f"\n# reasoning-gym {version}\n" + inspect.getsource(reading)


@register_reward("reasoning_gym", fields=("rg_task", "rg_entry"), judged_by=_reasoning_gym_judged_by)
def reasoning_gym(completion: str, problem: Problem) -> float:
    """reasoning-gym: the task's own `score_answer` (graded, 0 to 1) of the completion's answer: an
    `<answer>...</answer>` tag's content when there is one, else the best of its last line and its last number
    (essaflow.data.reasoning_gym.answer_candidates; docs/rewards.md). Correct at eval.correct_threshold."""
    from essaflow.data.reasoning_gym import score

    if not isinstance(problem.fields.get("rg_task"), str) or not isinstance(problem.fields.get("rg_entry"), dict):
        raise ValueError(f"reasoning_gym needs the problem's `rg_task` and `rg_entry` fields (data.source="
                         f"reasoning_gym); {problem.id!r} has {sorted(problem.fields)}")  # fmt: skip
    return score(completion, problem.fields)
