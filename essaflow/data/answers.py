"""Reading a final answer out of text: the last \\boxed{}, GSM8K's '####' line, the last number.

The data readers use these to take a reference answer from a worked solution; the rewards use them to take the
model's answer from a completion, so both read answers the same way.
"""

from __future__ import annotations

import re

# A number with thousands separators only in groups of three (1,234 / 12,345,678.5), or plain digits.
_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER = re.compile(rf"(?<![\d.,]){_NUM}(?![\d]|[.,]\d)")
# The '####' line of a GSM8K answer: optional currency sign, a number, then the rest of the line.
_HASH_NUMBER = re.compile(rf"^\$?\s*(?P<num>{_NUM})(?P<rest>.*)$")
_CONTINUES_NUMBER = re.compile(r"^(?:[\d]|[.,]\d)")
# What may follow a GSM8K number without being part of the answer: a unit in words ('72 clips', '5 dollars.'),
# a percent sign, a full stop. Anything else ('/2', '^n', ', 3', ' and 4') makes the line one answer, read whole.
_UNIT_TAIL = re.compile(r"^\s*(?:%|\s[A-Za-z][A-Za-z' -]*)?\s*[.!]?\s*$")


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
    """GSM8K convention: the answer on the line after the last '####', for the math verifier to judge.

    A GSM8K number is read alone and normalised ('#### 72 clips' -> '72', '#### 1,234' -> '1234', '#### $5.' ->
    '5', '#### 50%' -> '50'); one with separators out of groups of three ('12,34', '4,2.') gives None rather than a
    wrong number. Any other line goes whole, as written: fractions ('1/2', '-1/2'), powers and LaTeX ('$2^n$',
    '\\frac{1}{2}'), tuples and several values ('(1, 2)', '2, 3'), words ('seven', 'no solution').
    """
    if "####" not in text:
        return None
    line = text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
    if not line:
        return None
    m = _HASH_NUMBER.match(line)
    if m is None:
        return line
    rest = m.group("rest")
    if _CONTINUES_NUMBER.match(rest):
        return None  # '12,34' or '4,2.': separators out of groups of three, never guessed at
    if _UNIT_TAIL.match(rest):
        return m.group("num").replace(",", "")
    return line


def final_number(text: str) -> str | None:
    """The last well-formed number in text (separators only in groups of three), commas removed; None if none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def extract_answer(text: str) -> str | None:
    """Best-effort final answer: \\boxed{} first, then '####', then the last number."""
    for extractor in (last_boxed, after_hashes, final_number):
        ans = extractor(text)
        if ans:
            return ans
    return None
