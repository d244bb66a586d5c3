"""Answer extraction on realistic GSM8K / MATH solution strings, and the reward registry."""

import pytest

from essaflow.data.answers import after_hashes, extract_answer, last_boxed
from essaflow.judging.rewards import REWARDS, get_reward, register_reward

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


# --- rewards that match the data: GSM8K's '####' line, MATH's last \boxed{}, auto


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("... #### 72 clips", "72"),  # a unit after the number
        ("#### 72\n\nQuestion: a new problem with 5 apples", "72"),  # the model runs on after its answer
        ("#### 72.", "72"),
        ("#### $1,234", "1234"),  # thousands separators in groups of three
        ("#### 1,234,567.5", "1234567.5"),
        ("#### -5", "-5"),
        ("#### 12,34", None),  # not a thousands separator: never read as 1234
        ("#### 4,2.", None),  # nor as 42
        ("#### 1,2345", None),
        ("#### (1, 2)", "(1, 2)"),  # not a number: returned as written, commas kept
        ("#### \\frac{1}{2}", "\\frac{1}{2}"),
        ("####", None),
    ],
)
def test_gsm8k_reads_the_number_on_the_hashes_line(text, expected):
    assert after_hashes(text) == expected


def test_final_number_honours_groups_of_three():
    from essaflow.data.answers import final_number

    assert final_number("paid 1,234 dollars") == "1234"
    assert final_number("so 12,34") is None
    assert final_number("(1, 2)") == "2"


@pytest.mark.parametrize(
    ("completion", "reference", "reward"),
    [
        ("She has 5 + 3 = 8 apples.\n#### 8", "8", 1.0),
        ("#### 8 apples\n\nQuestion: next", "8", 1.0),
        ("#### 8.0", "8", 1.0),  # equivalent numeric form
        ("#### 1,000", "1000", 1.0),
        ("#### 9", "8", 0.0),
        ("#### 12,34", "1234", 0.0),  # a malformed number is wrong, not 1234
        ("no answer at all", "8", 0.0),
        ("so \\boxed{\\frac{1}{2}}", "0.5", 1.0),  # MATH: equivalent forms
        ("so \\boxed{\\dfrac{2}{4}}", "\\frac{1}{2}", 1.0),
        ("first \\boxed{3}, finally \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),  # the last \boxed{}
        ("finally \\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0),
        ("\\boxed{(1, 2)}", "(1,2)", 1.0),
        ("\\boxed{(2, 1)}", "(1,2)", 0.0),
        ("\\boxed{x^{2}+1}", "1+x^2", 1.0),  # nested braces
    ],
)
def test_math_verify_on_equivalent_and_wrong_forms(completion, reference, reward):
    assert get_reward("math_verify")(completion, reference) == reward


def test_math_verify_runs_outside_the_main_thread():
    """Prefect tasks and Ray actors call rewards from worker threads, where signal-based timeouts cannot run."""
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(get_reward("math_verify")("#### 72", "72")))
    t.start()
    t.join()
    assert out == [1.0]


def test_final_number_reward_on_equivalent_and_wrong_forms():
    fn = get_reward("final_number")
    assert fn("it is 7.0", "7") == 1.0 and fn("it is 8", "7") == 0.0 and fn("none", "7") == 0.0


def test_auto_follows_the_data():
    from essaflow.config import load_config
    from essaflow.judging.rewards import resolve_reward

    assert resolve_reward("auto", "file", "gsm8k") == "math_verify"
    assert resolve_reward("auto", "hf", "math") == "math_verify"
    assert resolve_reward("auto", "synthetic", "plain") == "exact_match"
    assert resolve_reward("final_number", "file", "gsm8k") == "final_number"
    assert load_config(None).eval.reward == "exact_match"
    cfg = load_config(None, ["data.source=file", "data.path=x.jsonl", "data.adapter=gsm8k"])
    assert cfg.eval.reward == "math_verify"
    with pytest.raises(ValueError, match="eval.reward=auto is resolved"):
        get_reward("auto")
