"""Countdown's verifier: is a completion an arithmetic expression over the given numbers that hits the target?

Many answers are right (`25+3*7` and `7*3+25` both make 46 from 3, 7, 25), so the reward checks the expression,
not a string. The completion's first line is parsed with Python's `ast` and walked, never evaluated by Python:
only integer literals, + - * /, and parentheses are accepted (no names, calls, attributes, powers or unary signs);
division is exact (fractions), by zero is wrong. Each given number may be used at most once (a number given twice
may be used twice); a literal that was not given makes the answer wrong. A trailing `=target` is accepted.
"""

from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction

MAX_CHARS = 200
"""Longest expression judged: anything longer scores 0 before it is parsed."""
_OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}


class NotAllowed(ValueError):
    """The expression holds something other than integers, + - * / and parentheses, or divides by zero."""


def expression_of(completion: str) -> str:
    """The expression a completion states: its first line, without a trailing `=target`."""
    line = completion.strip().split("\n", 1)[0].strip()
    return line.split("=", 1)[0].strip()


def expression_value(expr: str) -> tuple[Fraction, list[int]]:
    """(value, the integer literals used, in order); NotAllowed for anything but integer arithmetic."""
    if len(expr) > MAX_CHARS:
        raise NotAllowed(f"longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise NotAllowed(f"not an expression: {e.msg}") from None
    used: list[int] = []
    return _value(tree.body, used), used


def _value(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, used), _value(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise NotAllowed("division by zero")
        return _OPS[type(node.op)](left, right)
    raise NotAllowed(f"{type(node).__name__} is not integer arithmetic")


def verify(completion: str, numbers: list[int], target: int) -> bool:
    """True when the completion's expression uses only the given numbers (each at most as often as given) and
    equals the target exactly."""
    try:
        value, used = expression_value(expression_of(completion))
    except NotAllowed:
        return False
    if Counter(used) - Counter(numbers):  # a literal not given, or one used more often than given
        return False
    return value == target
