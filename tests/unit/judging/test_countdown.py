"""Countdown's verifier accepts every generated solution and any other right expression, and rejects a number used
twice, a number not given, a wrong value, and anything that is not integer arithmetic (names, calls, powers)."""

from __future__ import annotations

import pytest

from essaflow.data.countdown import ALPHABET, countdown_problems
from essaflow.judging.countdown import verify
from essaflow.judging.judge import Judge

PROBLEMS = countdown_problems(2000, count=4, operators=("+", "-", "*", "/"), seed=3)


def test_every_generated_solution_is_accepted_and_uses_every_number_once():
    judge = Judge("countdown")
    assert judge.score([p.answer for p in PROBLEMS], PROBLEMS).rewards == [1.0] * len(PROBLEMS)
    for p in PROBLEMS[:200]:
        digits = "".join(c if c.isdigit() else " " for c in p.answer).split()
        assert sorted(map(int, digits)) == sorted(p.fields["numbers"])
        assert set(p.prompt + p.answer) <= set(ALPHABET)
    assert len({p.prompt for p in PROBLEMS}) == len(PROBLEMS)
    assert countdown_problems(50, seed=3) == countdown_problems(50, seed=3) != countdown_problems(50, seed=4)


def test_parentheses_only_where_precedence_needs_them():
    for p in PROBLEMS:
        assert eval(p.answer.replace("/", "//")) == p.fields["target"]  # noqa: S307 - our own generated text
    assert any("(" in p.answer for p in PROBLEMS) and any("(" not in p.answer for p in PROBLEMS)


@pytest.mark.parametrize(
    ("completion", "right"),
    [
        ("25+3*7", True),
        ("7*3+25", True),  # another right answer: any expression counts
        ("(3*7)+25 = 46", True),  # a trailing =target is fine
        ("25+3*7\nbecause 3*7 is 21", True),  # only the first line is the answer
        ("25+25-4", False),  # 25 used twice, given once
        ("25+21", False),  # 21 was not given
        ("25+3+7", False),  # a wrong value
        ("__import__('os').getpid()", False),  # a call
        ("x+3*7", False),  # a name
        ("(25).__add__(21)", False),  # an attribute
        ("7**2-3", False),  # a power
        ("-3+7*7", False),  # a unary sign
        ("3/(7-7)+46", False),  # division by zero
        ("", False),
        ("+" * 500, False),  # too long: not parsed
    ],
)
def test_the_verifier(completion, right):
    assert verify(completion, [3, 7, 25], 46) is right


def test_a_number_given_twice_may_be_used_twice_and_division_is_exact():
    assert verify("5*5-1", [5, 5, 1], 24)
    assert not verify("5*5-1", [5, 1, 2], 24)
    assert verify("7/2*4", [7, 2, 4], 14) and not verify("7/2", [7, 2], 3)


def test_every_sft_answer_of_the_configured_task_is_accepted():
    from essaflow.config import DataConfig
    from essaflow.data import load_problems

    problems = load_problems(DataConfig(synthetic={"task": "countdown", "num_problems": 2000}))
    assert Judge("countdown").score([p.answer for p in problems], problems).rewards == [1.0] * len(problems)
    p = problems[0]
    n = p.fields["numbers"]
    wrong = [f"{n[0]}+{n[0]}+{n[1]}+{n[2]}", f"{p.fields['target']}", p.answer + "+1", f"abs({p.answer})", "x"]
    assert Judge("countdown").score(wrong, [p] * len(wrong)).rewards == [0.0] * len(wrong)
