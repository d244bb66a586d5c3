"""Answer extraction and verification, plus a registry so a reward is plugged by name.

Rewards are binary (1.0 / 0.0) by default, as both papers use (FGRPO-v2 sec. 5.2 uses math-verify).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from essaflow.registry import Registry

Reward = Callable[[str, str], float]
REWARDS: Registry[Reward] = Registry("reward")
register_reward = REWARDS.register
"""Decorator: make `fn(completion, reference) -> float` available as `name` in configs."""
get_reward = REWARDS.get
"""The reward registered as `name`; the error lists the known ones."""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced; None when absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i].strip()
    return None


def after_hashes(text: str) -> str | None:
    """GSM8K convention: the answer follows the last '####'."""
    if "####" not in text:
        return None
    return text.rsplit("####", 1)[1].strip().replace(",", "") or None


def final_number(text: str) -> str | None:
    """The last number in text, commas removed; None when there is none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def extract_answer(text: str) -> str | None:
    """Best-effort final answer: \\boxed{} first, then '####', then the last number."""
    for extractor in (last_boxed, after_hashes, final_number):
        ans = extractor(text)
        if ans:
            return ans
    return None


@register_reward("exact_match")
def exact_match(completion: str, reference: str) -> float:
    """Arithmetic: the completion's first line, stripped, equals the reference exactly."""
    first = completion.strip().split("\n", 1)[0].strip() if completion.strip() else ""
    return 1.0 if first == reference.strip() else 0.0


@register_reward("math_verify")
def math_verify_reward(completion: str, reference: str) -> float:
    """Math: extract the final answer and check symbolic equivalence with math-verify."""
    from math_verify import parse, verify

    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    gold = parse(f"${reference}$")
    pred = parse(f"${answer}$")
    if not gold or not pred:
        return 1.0 if answer.strip() == reference.strip() else 0.0
    return 1.0 if verify(gold, pred) else 0.0


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
