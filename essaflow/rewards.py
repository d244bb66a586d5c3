"""Answer extraction and verification, plus a registry so a reward is plugged by name.

Rewards are binary (1.0 / 0.0) by default, as both papers use (FGRPO-v2 sec. 5.2 uses math-verify).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

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

# A number with thousands separators only in groups of three (1,234 / 12,345,678.5), or plain digits.
_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER = re.compile(rf"(?<![\d.,]){_NUM}(?![\d]|[.,]\d)")
# The '####' line of a GSM8K answer: optional currency sign, the number, then anything that does not continue it
# ('72 clips', '72.', '$1,000'), or a malformed one ('12,34', '4,2.') that must not be read as 1234 or 42.
_HASH_NUMBER = re.compile(rf"^\$?\s*(?P<num>{_NUM})(?P<rest>.*)$")
_CONTINUES_NUMBER = re.compile(r"^(?:[\d]|[.,]\d)")


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
    """GSM8K convention: the answer on the line after the last '####'.

    A number there is read alone and normalised ('#### 72 clips' -> '72', '#### 1,234' -> '1234', '#### $5.' ->
    '5'); a malformed one ('12,34', '4,2.') gives None rather than a wrong number; anything else on the line is
    returned as written ('(1, 2)', '\\frac{1}{2}'), for math-verify to judge.
    """
    if "####" not in text:
        return None
    line = text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
    if not line:
        return None
    m = _HASH_NUMBER.match(line)
    if m is None:
        return line
    if _CONTINUES_NUMBER.match(m.group("rest")):
        return None  # '12,34' or '4,2.': separators out of groups of three, never guessed at
    return m.group("num").replace(",", "")


def final_number(text: str) -> str | None:
    """The last well-formed number in text (separators only in groups of three), commas removed; None if none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def resolve_reward(reward: str, source: str, adapter: str) -> str:
    """eval.reward=auto -> the reward that matches the data: math_verify for GSM8K and MATH answers (equivalent
    forms such as 0.5 and \\frac{1}{2} agree), exact_match for the synthetic task and plain files (answers as
    written). Any other name passes through."""
    if reward != AUTO_REWARD:
        return reward
    return "math_verify" if adapter in ("gsm8k", "math") else "exact_match"


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
