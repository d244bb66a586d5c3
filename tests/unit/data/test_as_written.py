"""Data as written: answers keep the source's text, non-scalar answers are named, whole-file problems are one error
naming the file and the place, empty and all-dropped sources fail, the template and prompt cap are checked."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from essaflow.config import ConfigError, DataConfig, load_config
from essaflow.data import BadRowsError, DataError, DataFileError, load_problems, read_problems


def _load(path, **kw):
    return read_problems(DataConfig(source="file", path=str(path), **kw))


def _answers(path, **kw):
    return [p.answer for p in _load(path, **kw).problems]


def test_json_numbers_keep_the_text_they_were_written_with(tmp_path):
    f = tmp_path / "n.jsonl"
    rows = ['{"prompt": "a", "answer": 3}', '{"prompt": "b", "answer": 3.0}', '{"prompt": "c", "answer": 1e5}']
    rows += ['{"prompt": "d", "answer": -0.50}', '{"prompt": "e", "answer": true}', '{"prompt": "f", "answer": " 12 "}']
    f.write_text("\n".join(rows) + "\n")
    assert _answers(f) == ["3", "3.0", "1e5", "-0.50", "true", "12"]
    g = tmp_path / "n.json"
    g.write_text('[{"id": 7, "prompt": "a", "answer": 3}, {"id": 8, "prompt": "b", "answer": 2.50}]')
    assert [(p.id, p.answer) for p in _load(g).problems] == [("7", "3"), ("8", "2.50")]


def test_a_parquet_int_column_with_a_null_stays_int(tmp_path):
    f = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b", "c"], "answer": pa.array([7, None, 12], pa.int64())}), f)
    loaded = _load(f, on_bad_row="drop")
    assert [p.answer for p in loaded.problems] == ["7", "12"] and len(loaded.dropped) == 1
    # the same column written by pandas is float64 (7.0, NaN): still "7", not "7.0"
    g = tmp_path / "pandas.parquet"
    pd.DataFrame({"prompt": ["a", "b", "c"], "answer": [7, None, 2.5]}).to_parquet(g)
    assert _answers(g, on_bad_row="drop") == ["7", "2.5"]


def test_csv_cells_are_the_text_between_the_commas(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text('id,prompt,answer\n001,"a, b",3.0\n002,"multi\nline",007\n')
    assert [(p.id, p.prompt, p.answer) for p in _load(f).problems] == [
        ("001", "a, b", "3.0"),
        ("002", "multi\nline", "007"),
    ]


@pytest.mark.parametrize(
    ("value", "kind"),
    [([1, 2], "a list"), ({"x": 1}, "an object")],
)
def test_non_scalar_answers_are_named_or_dropped_and_counted(tmp_path, value, kind):
    f = tmp_path / "ns.jsonl"
    f.write_text(json.dumps({"prompt": "a", "answer": value}) + "\n" + json.dumps({"prompt": "b", "answer": 1}))
    with pytest.raises(BadRowsError, match=rf"{f}: line 1, column 'answer': answer is {kind}, not text or a number"):
        _load(f)
    loaded = _load(f, on_bad_row="drop")
    assert [p.answer for p in loaded.problems] == ["1"] and len(loaded.dropped) == 1


def test_parquet_bytes_and_list_answers_are_named(tmp_path):
    f = tmp_path / "b.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "answer": pa.array([b"\x01", b"2"], pa.binary())}), f)
    with pytest.raises(BadRowsError, match=r"row 0, column 'answer': answer is bytes, not text or a number"):
        _load(f)
    g = tmp_path / "l.parquet"
    pq.write_table(pa.table({"prompt": ["a"], "answer": [[1, 2]]}), g)
    with pytest.raises(BadRowsError, match=r"row 0, column 'answer': answer is a list"):
        _load(g)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "the file is empty"),
        ("blank.csv", b"\n\n", "the file is empty"),
        ("header.csv", b"prompt,answer\n", "no rows"),
        ("empty.json", b"[]", "no rows"),
        ("bad.json", b'[{"prompt": "a", "answer": 1}] trailing', "line 1, column 32: not valid JSON (Extra data)"),
        ("lines.json", b'{"prompt": "a", "answer": 1}\n{"prompt": "b", "answer": 2}\n', "line 2, column 1"),
        ("scalar.json", b'"just a string"', "line 1, column 1: the top level is a JSON string"),
        ("latin1.csv", b"prompt,answer\n\xe9t\xe9,1\n", "line 2, column 1: not UTF-8 text (byte 0xe9)"),
        ("latin1.json", b'[{"prompt": "\xe9", "answer": 1}]', "line 1, column 14: not UTF-8 text"),
        ("dup.csv", b"prompt,answer,prompt\na,1,b\n", "line 1: the header names column 'prompt' twice"),
        ("nul.parquet", b"PAR1 not really", "not a readable Parquet file"),
        ("data.txt", b"prompt answer", "unsupported data file type '.txt'"),
        ("nan.jsonl", b'{"prompt": "a", "answer": NaN}\n', "every row"),
    ],
)
def test_a_malformed_file_is_one_error_naming_it_and_the_place(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DataError) as err:
        _load(f, on_bad_row="drop")
    assert str(f) in str(err.value) and message in str(err.value)


def test_a_missing_column_is_one_error_listing_the_columns_present(tmp_path):
    f = tmp_path / "gsm.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "final": "#### 1"}) for i in range(50)))
    with pytest.raises(DataFileError) as err:
        _load(f, adapter="gsm8k")
    msg = str(err.value)
    assert msg.count("no column") == 1 and "no column 'answer'" in msg and "['question', 'final']" in msg
    with pytest.raises(DataFileError, match=r"no column 'qestion' \(the prompt, from data.columns.prompt\)"):
        _load(f, columns={"prompt": "qestion", "answer": "final"})
    assert len(_load(f, adapter="gsm8k", columns={"answer": "final"}).problems) == 50


def test_every_row_dropped_is_an_error_and_a_partial_drop_is_counted(tmp_path, caplog):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "", "answer": 1}\n{"prompt": "c", "answer": 2}\n')
    with caplog.at_level("WARNING"):
        problems = load_problems(DataConfig(source="file", path=str(f), on_bad_row="drop"))
    assert [p.answer for p in problems] == ["2"] and "dropped 2 malformed row(s)" in caplog.text
    f.write_text('{"prompt": "a"}\n{"prompt": "", "answer": 1}\n')
    with pytest.raises(BadRowsError, match="every row of .* is malformed .2 dropped"):
        _load(f, on_bad_row="drop")


def test_gsm8k_and_math_adapters_name_a_missing_final_answer(tmp_path):
    f = tmp_path / "g.jsonl"
    f.write_text(json.dumps({"question": "q", "answer": "no marker here"}) + "\n")
    with pytest.raises(BadRowsError, match=r"line 1, column 'answer': no '#### <answer>' line"):
        _load(f, adapter="gsm8k")
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps({"problem": "q", "solution": "it is 5"}) + "\n")
    with pytest.raises(BadRowsError, match=r"line 1, column 'solution': no \\boxed"):
        _load(m, adapter="math")


def test_max_prompt_chars_caps_the_templated_prompt(tmp_path):
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"prompt": "x" * 100, "answer": 1}) + "\n" + json.dumps({"prompt": "y", "answer": 2}))
    with pytest.raises(BadRowsError, match=r"line 1, column 'prompt': prompt is 100 characters, over data.max"):
        _load(f, max_prompt_chars=50)
    assert len(_load(f, max_prompt_chars=50, on_bad_row="drop").problems) == 1
    assert len(_load(f, max_prompt_chars=None).problems) == 2
    with pytest.raises(BadRowsError, match="prompt is 106 characters"):
        _load(f, max_prompt_chars=104, prompt_template="Q: {prompt}\nA:")


def test_the_template_must_hold_the_prompt_and_file_sources_need_a_path():
    with pytest.raises(ConfigError, match=r"data.prompt_template: .*must contain '\{prompt\}'"):
        load_config(None, ["data.prompt_template=Answer"])
    with pytest.raises(ConfigError, match=r"data.path is required for data.source='file'"):
        load_config(None, ["data.source=file"])
    with pytest.raises(ConfigError, match=r"data.columns: .*unknown field\(s\) \['promt'\]"):
        load_config(None, ["data.columns={promt: q}"])


def test_a_missing_data_path_names_it(tmp_path):
    with pytest.raises(DataFileError, match=r"nope.jsonl: data.path does not exist"):
        _load(tmp_path / "nope.jsonl")


def test_hf_int_columns_with_nulls_stay_int_and_rows_are_named(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "a", "answer": 7}, {"prompt": "b", "answer": None}])
    ds.save_to_disk(str(tmp_path / "ds"))
    cfg = DataConfig(source="hf", path=str(tmp_path / "ds"))
    with pytest.raises(BadRowsError, match=r"ds: row 1, column 'answer': answer is missing"):
        read_problems(cfg)
    assert [p.answer for p in read_problems(cfg.model_copy(update={"on_bad_row": "drop"})).problems] == ["7"]


def test_windows_line_endings_and_a_bom_read_the_same(tmp_path):
    f = tmp_path / "w.csv"
    f.write_bytes(b"\xef\xbb\xbfprompt,answer\r\na,1\r\nb,\r\n")
    with pytest.raises(BadRowsError, match=r"line 3, column 'answer': answer is missing"):
        _load(f)
    g = tmp_path / "w.jsonl"
    g.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "answer": 1}\r\n{"prompt": "b", "answer": 2}\r\n')
    assert _answers(g) == ["1", "2"]
