"""Programs from examples, synthetic and seeded: write a Python function of x from a few input/output pairs.

A problem's prompt reads `1>3 2>5 4>9 7>15:` (x>f(x) pairs, inputs ascending); the answer is one program that
fits, the SFT data's, as a one-line lambda (`f=lambda x:x*2+1`). Its `tests` field holds asserts on the other
inputs of the domain (`assert f(0)==1`), which the `code_tests` reward runs after the completion in the sandbox;
any program that passes them is right (`f=lambda x:2*x+1` too).

A function is a chain of 1 to `max_steps` steps applied to x, each one of `x+a`, `x-a`, `x*a`, `x//a`, `x%a`,
`abs(x)`, `min(x,a)`, `max(x,a)` with a small constant. Each step must change the function on the domain, the
function must not be constant, and the shown pairs must single out one function of the grammar: no other chain of
at most `max_steps` steps agrees with them and differs elsewhere on the domain. So the examples always determine
the answer, and a wrong program fails a test.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache

from essaflow.data.draws import draws
from essaflow.data.schema import Problem

ALPHABET = "0123456789+-*/%(),:=> abdfilmnsx"
"""Every character a prompt or program holds (a character tokenizer's vocabulary): digits, the operators, and the
letters of `f=lambda x:`, `abs`, `min` and `max`."""
KINDS = ("+", "-", "*", "//", "%", "abs", "min", "max")
"""The step kinds a function is built from."""
_CONSTANTS = {"+": range(1, 10), "-": range(1, 10), "*": range(2, 6), "//": range(2, 6), "%": range(2, 7),
              "abs": (None,), "min": range(0, 10), "max": range(0, 10)}  # fmt: skip
_LEVEL = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}
MAX_OUTPUT = 99
"""Largest |f(x)| on the domain: outputs stay one or two digits."""

Step = tuple[str, "int | None"]
Values = tuple[int, ...]


def _apply(kind: str, a: int | None, v: int) -> int:
    if kind == "+":
        return v + a
    if kind == "-":
        return v - a
    if kind == "*":
        return v * a
    if kind == "//":
        return v // a
    if kind == "%":
        return v % a
    if kind == "abs":
        return abs(v)
    return min(v, a) if kind == "min" else max(v, a)


def _text(steps: list[Step]) -> str:
    """The chain as a Python expression of x, parenthesised only where precedence needs it."""
    text, level = "x", 3  # 3: an atom (a name or a call) needs no parentheses
    for kind, a in steps:
        if kind in _LEVEL:
            left = f"({text})" if level < _LEVEL[kind] else text  # left-associative: equal levels chain freely
            text, level = f"{left}{kind}{a}", _LEVEL[kind]
        else:
            text, level = (f"abs({text})" if kind == "abs" else f"{kind}({text},{a})"), 3
    return text


@cache
def _steps(kinds: tuple[str, ...]) -> tuple[Step, ...]:
    return tuple((k, a) for k in kinds for a in _CONSTANTS[k])


@cache
def _functions(kinds: tuple[str, ...], max_steps: int, domain: int) -> dict[Values, int]:
    """Every function of the grammar on the domain [0, domain), as its outputs, with the fewest steps that make it
    (0: x itself)."""
    depth = {tuple(range(domain)): 0}
    level = set(depth)
    for n in range(1, max_steps + 1):
        level = {tuple(_apply(k, a, v) for v in f) for f in level for k, a in _steps(kinds)} - depth.keys()
        depth.update(dict.fromkeys(level, n))
    return depth


@cache
def _shown_counts(kinds: tuple[str, ...], max_steps: int, domain: int, shown: tuple[int, ...]) -> Counter:
    """How many functions of the grammar give each tuple of outputs on the `shown` inputs."""
    return Counter(tuple(f[x] for x in shown) for f in _functions(kinds, max_steps, domain))


def _chain(rng: random.Random, kinds: tuple[str, ...], max_steps: int, domain: int) -> tuple[list[Step], Values] | None:
    """A random chain whose every step changes the function (None when a draw went nowhere)."""
    steps: list[Step] = []
    values: Values = tuple(range(domain))
    for _ in range(rng.randint(1, max_steps)):
        kind = rng.choice(kinds)
        a = rng.choice(_CONSTANTS[kind])
        after = tuple(_apply(kind, a, v) for v in values)
        if after == values or max(map(abs, after)) > MAX_OUTPUT:
            return None
        steps.append((kind, a))
        values = after
    return (steps, values) if len(set(values)) > 1 else None


def programs_problems(
    num_problems: int, max_steps: int = 2, examples: int = 4, domain: int = 10, kinds: tuple[str, ...] = KINDS,
    seed: int = 0,
) -> list[Problem]:  # fmt: skip
    """`num_problems` distinct problems: `examples` pairs shown out of the inputs 0..domain-1, asserts on the rest;
    same arguments => same list."""
    if not 1 <= examples < domain:
        raise ValueError(f"examples must be in [1, {domain - 1}] (domain {domain}), got {examples}")
    kinds = tuple(kinds)
    rng, out, seen = random.Random(seed), [], set()
    for _ in draws(num_problems, lambda: len(out)):  # stops early for knobs that hold too few problems
        if len(out) == num_problems:
            return out
        drawn = _chain(rng, kinds, max_steps, domain)
        if drawn is None:
            continue
        steps, values = drawn
        if _functions(kinds, max_steps, domain)[values] < len(steps):
            continue  # a shorter chain makes the same function: the answer is always a shortest one
        shown = tuple(sorted(rng.sample(range(domain), examples)))
        if _shown_counts(kinds, max_steps, domain, shown)[tuple(values[x] for x in shown)] != 1:
            continue  # another function of the grammar fits the examples too
        prompt = " ".join(f"{x}>{values[x]}" for x in shown) + ":"
        if prompt in seen:
            continue
        seen.add(prompt)
        tests = "".join(f"assert f({x})=={values[x]}\n" for x in range(domain) if x not in shown)
        answer = f"f=lambda x:{_text(steps)}"
        out.append(Problem(id=f"programs-{len(out)}", prompt=prompt, answer=answer, fields={"tests": tests}))
    raise ValueError(f"cannot draw {num_problems} distinct program problems of up to {max_steps} steps with "
                     f"{examples} examples on inputs 0..{domain - 1}")  # fmt: skip
