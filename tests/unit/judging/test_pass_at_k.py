"""pass@k: the unbiased Codex estimator against exact binomials and its edge cases."""

from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from essaflow.judging.evaluation import pass_at_k


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_matches_exact_binomials(data):
    n = data.draw(st.integers(1, 200))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    exact = 1.0 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-9)


def test_edge_cases():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 7, 4) == 1.0  # n - c < k
    assert pass_at_k(20, 5, 1) == pytest.approx(5 / 20)


def test_differs_from_biased_plugin():
    n, c, k = 10, 2, 5
    assert pass_at_k(n, c, k) != pytest.approx(1 - (1 - c / n) ** k)


@pytest.mark.parametrize("n,c,k", [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1)])
def test_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
