"""Countdown, synthetic and seeded: reach a target from a few given numbers with + - * /.

A problem's prompt reads `3 7 25>46:`; its fields carry `numbers` ([3, 7, 25]) and `target` (46), which the
`countdown` reward verifies any expression against (essaflow.judging.countdown). The answer is the one solution
the generator built, the SFT data's: every number used once, each intermediate value a positive integer, as few
parentheses as the precedence needs (`25+3*7`, `(25-3)*7`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from essaflow.data.draws import draws
from essaflow.data.schema import Problem

ALPHABET = "0123456789+-*/()>: "
"""Every character a Countdown prompt or solution holds (a character tokenizer's vocabulary)."""
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True)
class _Term:
    text: str
    value: int
    op: str | None = None
    """The term's outermost operator (None for a number): decides where parentheses go."""

    def operand(self, parent: str, right: bool) -> str:
        """This term's text as an operand of `parent`, parenthesised only where precedence needs it."""
        if self.op is None:
            return self.text
        weaker = _PRECEDENCE[self.op] < _PRECEDENCE[parent]
        regroups = right and _PRECEDENCE[self.op] == _PRECEDENCE[parent] and parent in "-/"
        return f"({self.text})" if weaker or regroups else self.text


def _combine(a: _Term, b: _Term, op: str) -> _Term | None:
    """a op b when it stays a positive integer (None otherwise)."""
    value = {"+": a.value + b.value, "-": a.value - b.value, "*": a.value * b.value}.get(op)
    if op == "/":
        value = a.value // b.value if b.value and a.value % b.value == 0 else None
    if value is None or value <= 0:
        return None
    return _Term(f"{a.operand(op, False)}{op}{b.operand(op, True)}", value, op)


def _solution(rng: random.Random, numbers: list[int], operators: list[str]) -> _Term | None:
    """A random expression using every number once (pairs merged at random), or None when a draw went nowhere."""
    pool = [_Term(str(n), n) for n in numbers]
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        merged = _combine(pool[i], pool[j], rng.choice(operators))
        if merged is None:
            return None
        pool = [t for k, t in enumerate(pool) if k not in (i, j)] + [merged]
    return pool[0]


def countdown_problems(
    num_problems: int, count: int = 3, low: int = 1, high: int = 25, operators: tuple[str, ...] = ("+", "-", "*"),
    max_target: int = 999, seed: int = 0,
) -> list[Problem]:  # fmt: skip
    """`num_problems` distinct problems of `count` numbers in [low, high]; same arguments => same list."""
    rng, out, seen = random.Random(seed), [], set()
    for _ in draws(num_problems, lambda: len(out)):  # stops early for knobs that hold too few problems
        if len(out) == num_problems:
            return out
        numbers = [rng.randint(low, high) for _ in range(count)]
        term = _solution(rng, numbers, list(operators))
        if term is None or term.value > max_target:
            continue
        prompt = f"{' '.join(map(str, numbers))}>{term.value}:"
        if prompt in seen:
            continue
        seen.add(prompt)
        fields = {"numbers": numbers, "target": term.value}
        out.append(Problem(id=f"countdown-{len(out)}", prompt=prompt, answer=term.text, fields=fields))
    raise ValueError(f"cannot draw {num_problems} distinct Countdown problems of {count} numbers in [{low}, {high}] "
                     f"with targets up to {max_target}")  # fmt: skip
