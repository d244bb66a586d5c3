"""Data sources, malformed-row reporting and deterministic splits."""

import json

import pandas as pd
import pytest

from essaflow.config import DataConfig
from essaflow.data import BadRowsError, load_problems, split_problems
from essaflow.data.synthetic import synthetic_problems


def test_synthetic_is_deterministic_and_correct():
    a = synthetic_problems(200, 1, 3, ["+", "-", "*"], seed=7)
    b = synthetic_problems(200, 1, 3, ["+", "-", "*"], seed=7)
    assert a == b
    assert len({p.prompt for p in a}) == 200
    for p in a:
        expr = p.prompt.rstrip("=")
        assert str(eval(expr)) == p.answer  # noqa: S307 - our own generated arithmetic
    assert synthetic_problems(200, seed=8) != a


def test_splits_are_disjoint_and_order_independent():
    problems = synthetic_problems(500, seed=1)
    s1 = split_problems(problems, eval_size=50, sft_fraction=0.4)
    s2 = split_problems(list(reversed(problems)), eval_size=50, sft_fraction=0.4)
    assert s1 == s2 and s1.fingerprint() == s2.fingerprint()
    ids = [set(p.id for p in part) for part in (s1.sft, s1.train, s1.eval)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert sum(map(len, ids)) == 500 and len(s1.eval) == 50


ROWS = [
    {"id": "a", "question": "1+1?", "answer": "2"},
    {"id": "b", "question": "2+2?", "answer": None},
    {"id": "c", "question": 5, "answer": "3"},
    {"id": "a", "question": "dup?", "answer": "1"},
    {"id": "e", "question": "3+3?", "answer": "6"},
]


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet"])
def test_local_files_with_column_mapping(tmp_path, suffix):
    good = [r for r in ROWS if r["id"] in ("a", "e")][:2]
    good = [ROWS[0], ROWS[4]]
    path = tmp_path / f"data.{suffix}"
    frame = pd.DataFrame(good)
    {
        "jsonl": lambda: frame.to_json(path, orient="records", lines=True),
        "json": lambda: frame.to_json(path, orient="records"),
        "csv": lambda: frame.to_csv(path, index=False),
        "parquet": lambda: frame.to_parquet(path),
    }[suffix]()
    problems = load_problems(DataConfig(source="file", path=str(path), columns={"prompt": "question"}))
    assert [(p.id, p.prompt, p.answer) for p in problems] == [("a", "1+1?", "2"), ("e", "3+3?", "6")]


def test_malformed_rows_reported_with_row_numbers(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS))
    cfg = DataConfig(source="file", path=str(path), columns={"prompt": "question"})
    with pytest.raises(BadRowsError) as err:
        load_problems(cfg)
    assert [i for i, _ in err.value.bad] == [1, 2, 3]
    msg = str(err.value)
    assert str(path) in msg
    assert "line 2, column 'answer': answer is missing" in msg
    assert "line 3, column 'question': prompt is the number 5, not text" in msg
    assert "line 4, column 'id': duplicate id 'a' (first at line 1)" in msg


def test_malformed_rows_dropped_and_counted(tmp_path, caplog):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS))
    cfg = DataConfig(source="file", path=str(path), columns={"prompt": "question"}, on_bad_row="drop")
    with caplog.at_level("WARNING"):
        problems = load_problems(cfg)
    assert [p.id for p in problems] == ["a", "e"]
    assert "dropped 3 malformed row(s)" in caplog.text


def test_hf_gsm8k_adapter_on_local_dataset_dir(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list(
        [
            {"question": "Natalia sold 48 clips...", "answer": "48/2 = 24\n48+24 = 72\n#### 72"},
            {"question": "Weng earns $12 an hour...", "answer": "12/60 = 0.2\n0.2*50 = 10\n#### 10"},
        ]
    )
    ds.save_to_disk(str(tmp_path / "gsm8k"))
    cfg = DataConfig(source="hf", path=str(tmp_path / "gsm8k"), adapter="gsm8k")
    problems = load_problems(cfg)
    assert [p.answer for p in problems] == ["72", "10"]


def test_hf_math_adapter_via_load_dataset_on_local_files(tmp_path):
    rows = [{"problem": "Compute 1/2+1/3.", "solution": "It is $\\boxed{\\frac{5}{6}}$."}]
    (tmp_path / "math").mkdir()
    pd.DataFrame(rows).to_json(tmp_path / "math" / "test.jsonl", orient="records", lines=True)
    cfg = DataConfig(source="hf", path=str(tmp_path / "math"), adapter="math", hf_split="test")
    problems = load_problems(cfg)
    assert problems[0].answer == "\\frac{5}{6}" and problems[0].prompt == "Compute 1/2+1/3."
