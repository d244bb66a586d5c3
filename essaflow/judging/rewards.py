"""Rewards: answer verification, plus a registry so a reward is plugged by name.

Rewards are binary (1.0 / 0.0) by default, as both papers use (FGRPO-v2 sec. 5.2 uses math-verify).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from essaflow.data.answers import extract_answer
from essaflow.registry import Registry

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


def resolve_reward(reward: str, source: str, adapter: str) -> str:
    """eval.reward=auto -> the reward that matches the data: math_verify for GSM8K and MATH answers (equivalent
    forms such as 0.5 and \\frac{1}{2} agree), exact_match for the synthetic task and plain files (answers as
    written). Any other name passes through."""
    if reward != AUTO_REWARD:
        return reward
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
