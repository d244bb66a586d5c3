"""Programs from examples: seeded and distinct, every character in the alphabet, the examples single out one
function of the grammar. That the reference program passes its own hidden tests in the real sandbox while a wrong
one, or one that fits only the shown examples, fails: tests/integration/test_code_task_references.py."""

from __future__ import annotations

import pytest

from essaflow.data.programs import ALPHABET, programs_problems

PROBLEMS = programs_problems(500, seed=3)


def _pairs(prompt: str) -> dict[int, int]:
    return dict(tuple(map(int, pair.split(">"))) for pair in prompt.rstrip(":").split())


def _reference(problem):
    namespace: dict = {}
    exec(problem.answer, namespace)  # noqa: S102 - our own generated one-line lambda
    return namespace["f"]


def test_same_seed_same_problems_and_every_prompt_distinct():
    assert programs_problems(50, seed=3) == PROBLEMS[:50]
    assert programs_problems(50, seed=4) != PROBLEMS[:50]
    assert len({p.prompt for p in PROBLEMS}) == len(PROBLEMS)
    assert len({p.id for p in PROBLEMS}) == len(PROBLEMS)


def test_fields_formats_and_alphabet():
    for p in PROBLEMS:
        assert p.answer.startswith("f=lambda x:") and p.prompt.endswith(":")
        assert set(p.prompt + p.answer) <= set(ALPHABET)
        shown = _pairs(p.prompt)
        assert len(shown) == 4 and list(shown) == sorted(shown)
        asserts = p.fields["tests"].splitlines()
        assert len(asserts) == 10 - 4 and all(line.startswith("assert f(") for line in asserts)
        tested = {int(line[len("assert f(") :].split(")")[0]) for line in asserts}
        assert not tested & set(shown), "the tests are on the other inputs"
        f = _reference(p)
        assert all(f(x) == y for x, y in shown.items())
        assert len({f(x) for x in range(10)}) > 1, "never a constant function"


def test_the_knobs_shape_the_problems():
    deep = programs_problems(200, max_steps=3, examples=5, domain=12, kinds=("+", "*", "%"), seed=1)
    assert all(len(_pairs(p.prompt)) == 5 for p in deep)
    assert all(len(p.fields["tests"].splitlines()) == 12 - 5 for p in deep)
    assert not any(k in p.answer for p in deep for k in ("abs", "min", "max", "//"))
    with pytest.raises(ValueError, match="examples"):
        programs_problems(10, examples=10, domain=10)
