"""The code tasks' own references pass their tests in the real sandbox and wrong programs fail: HumanEval's
canonical solutions (tests/unit/data/test_humaneval.py has the rest of the source) and the generated programs
(tests/unit/data/test_programs.py). Processes: code_tests runs each program in bubblewrap."""

from __future__ import annotations

import re

import pytest

from essaflow.config import load_config
from essaflow.data.humaneval import humaneval_problems
from essaflow.data.programs import programs_problems
from essaflow.judging.judge import Judge, judge_for

pytestmark = pytest.mark.integration
PROBLEMS = programs_problems(500, seed=3)


def _pairs(prompt: str) -> dict[int, int]:
    return dict(tuple(map(int, pair.split(">"))) for pair in prompt.rstrip(":").split())


def test_canonical_solutions_pass_and_swapped_ones_fail():
    problems = humaneval_problems()[:12]
    judge = judge_for(load_config(None, ["data.source=humaneval", "method=none", "sft.enabled=false"]).eval)
    assert judge.score([p.answer for p in problems], problems).rewards == [1.0] * 12
    # a chat model's whole function in a fence, its imports left to the prompt's prelude
    fenced = [f"Here:\n```python\n{p.answer}\n```" for p in problems]
    assert judge.score(fenced, problems).rewards == [1.0] * 12
    swapped = problems[1:] + problems[:1]
    assert judge.score([p.answer for p in swapped], problems).rewards == [0.0] * 12


def test_reference_programs_pass_their_tests_in_the_sandbox_and_wrong_ones_fail():
    judge = Judge("code_tests")  # the real bubblewrap pool
    problems = PROBLEMS[:40]
    assert judge.score([p.answer for p in problems], problems).rewards == [1.0] * len(problems)
    another_form = [re.sub(r"\bx\b", "y", p.answer.replace("f=lambda x:", "def f(x):return ")) for p in problems]
    assert judge.score(another_form, problems).rewards == [1.0] * len(problems)  # any right program counts
    wrong = [p.answer + "+1" for p in problems]
    assert judge.score(wrong, problems).rewards == [0.0] * len(problems)
    # a lookup table of the shown pairs alone fits the prompt but not the hidden tests
    tables = [f"f=lambda x:{_pairs(p.prompt)}.get(x,0)" for p in problems]
    assert sum(judge.score(tables, problems).rewards) < len(problems) / 4
