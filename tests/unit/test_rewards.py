"""Answer extraction on realistic GSM8K / MATH solution strings, and the reward registry."""

import pytest

from essaflow.rewards import REWARDS, after_hashes, extract_answer, get_reward, last_boxed, register_reward

GSM8K_SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
MATH_SOLUTION = (
    "We have $\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}$, so first \\boxed{\\frac{1}{6}} is wrong; "
    "the answer is $\\boxed{\\frac{5}{6}}$."
)


def test_gsm8k_answer_after_hashes():
    assert after_hashes(GSM8K_SOLUTION) == "72"
    assert after_hashes("so #### 1,234") == "1234"
    assert after_hashes("no marker") is None


def test_math_last_boxed_with_nested_braces():
    assert last_boxed(MATH_SOLUTION) == "\\frac{5}{6}"
    assert last_boxed("\\boxed{x^{2}+1}") == "x^{2}+1"
    assert last_boxed("nothing here") is None


def test_extract_answer_fallback_order():
    assert extract_answer("the result is 41, or maybe 42") == "42"
    assert extract_answer("\\boxed{7} then 9") == "7"
    assert extract_answer("no digits") is None


def test_exact_match_reads_first_line():
    em = get_reward("exact_match")
    assert em("168", "168") == 1.0
    assert em(" 168\nnoise", "168") == 1.0
    assert em("1680", "168") == 0.0
    assert em("", "168") == 0.0


def test_math_verify_symbolic_equivalence():
    mv = get_reward("math_verify")
    assert mv("The answer is \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert mv("The answer is \\boxed{\\frac{10}{20}}", "\\frac{1}{2}") == 1.0
    assert mv("The answer is \\boxed{3}", "\\frac{1}{2}") == 0.0
    assert mv(GSM8K_SOLUTION, "72") == 1.0


def test_registry_plug_in_by_name():
    @register_reward("always_one_test")
    def always(c: str, r: str) -> float:
        return 1.0

    assert get_reward("always_one_test")("x", "y") == 1.0
    REWARDS.pop("always_one_test")
    with pytest.raises(KeyError, match="unknown reward 'always_one_test'"):
        get_reward("always_one_test")
