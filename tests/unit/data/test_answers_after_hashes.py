"""What follows '####' goes to the math verifier whole; GSM8K's numbers and thousands separators still read."""

import json

import pytest

from essaflow.data import load_problems
from essaflow.data.answers import after_hashes
from essaflow.data.config import DataConfig
from essaflow.judging.rewards import math_verify_reward


@pytest.mark.parametrize(
    ("line", "read"),
    [
        ("72", "72"),
        ("72 clips", "72"),
        ("1,234", "1234"),
        ("$1,000", "1000"),
        ("$5.", "5"),
        ("50%", "50"),
        ("-3", "-3"),
        ("1,234,567.5", "1234567.5"),
        ("1/2", "1/2"),
        ("-1/2", "-1/2"),
        ("$2^n$", "$2^n$"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("(1, 2)", "(1, 2)"),
        ("2, 3", "2, 3"),
        ("3 and 5", "3 and 5"),
        ("seven", "seven"),
        ("no solution", "no solution"),
        ("12,34", None),
        ("4,2.", None),
    ],
)
def test_the_line_after_the_hashes(line, read):
    assert after_hashes(f"Some working.\n#### {line}") == read


@pytest.mark.parametrize(
    ("reference", "completion", "score"),
    [
        ("1/2", "so #### \\frac{1}{2}", 1.0),
        ("1/2", "#### 0.5", 1.0),
        ("-1/2", "#### -1/2", 1.0),
        ("2^n", "#### $2^n$", 1.0),
        ("(1, 2)", "#### (1, 2)", 1.0),
        ("2, 3", "#### 2, 3", 1.0),
        ("seven", "The count is\n#### seven", 1.0),
        ("1234", "#### 1,234", 1.0),
        ("72", "#### 72 clips", 1.0),
        ("1/2", "#### 1", 0.0),
        ("(1, 2)", "#### (1, 3)", 0.0),
        ("seven", "#### eight", 0.0),
    ],
)
def test_the_verifier_judges_the_whole_answer(reference, completion, score):
    assert math_verify_reward(completion, reference) == score


def test_gsm8k_rows_keep_competition_answers_whole(tmp_path):
    f = tmp_path / "g.jsonl"
    answers = ["x\n#### 1/2", "y\n#### $2^n$", "z\n#### 1,234", "w\n#### (1, 2)", "v\n#### seven", "u\n#### 72 clips"]
    f.write_text("".join(json.dumps({"question": f"q{i}", "answer": a}) + "\n" for i, a in enumerate(answers)))
    got = [p.answer for p in load_problems(DataConfig(source="file", path=str(f), adapter="gsm8k"))]
    assert got == ["1/2", "$2^n$", "1234", "(1, 2)", "seven", "72"]
