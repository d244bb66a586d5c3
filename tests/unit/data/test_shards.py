"""data.path as a directory or glob of shards in mixed formats, its snapshot, and eval.data read from files."""

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from essaflow.config import parse_config
from essaflow.data import DataError, DataFileError, read_problems
from essaflow.data.config import DataConfig, HeldOutSourceConfig
from essaflow.data.fingerprint import data_snapshot_digest
from essaflow.data.prepare import prepare_data


def _rows(start: int, n: int) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(start, start + n)]


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["prompt", "answer"])
        w.writeheader()
        w.writerows(rows)


def _shards(root):
    _jsonl(root / "part-0.jsonl", _rows(0, 40))
    _csv(root / "part-1.csv", _rows(40, 30))
    (root / "more").mkdir()
    pq.write_table(pa.Table.from_pylist(_rows(70, 30)), root / "more" / "part-2.parquet")
    (root / "_SUCCESS").write_text("")
    (root / ".part-3.jsonl.crc").write_text("x")
    return root


def test_a_directory_of_mixed_shards_reads_every_one_and_records_the_snapshot(tmp_path):
    root = _shards(tmp_path / "shards")
    loaded = read_problems(DataConfig(source="file", path=str(root)))
    assert len(loaded.problems) == 100 and len({p.id for p in loaded.problems}) == 100
    assert {p.id for p in loaded.problems if p.prompt == "45+1="} == {"part-1.csv:5"}  # <file>:<row>
    files = loaded.snapshot.files
    assert sorted(f.rsplit("/", 1)[-1] for f in files) == ["part-0.jsonl", "part-1.csv", "part-2.parquet"]
    assert all(len(v) == 64 for v in files.values())  # each file's SHA-256
    assert loaded.snapshot.digest == data_snapshot_digest(DataConfig(source="file", path=str(root)))


def test_a_glob_names_the_shards_and_an_appended_shard_is_a_new_snapshot(tmp_path):
    root = _shards(tmp_path / "shards")
    cfg = DataConfig(source="file", path=f"{root}/*.jsonl")
    first = read_problems(cfg)
    assert len(first.problems) == 40 and list(first.snapshot.files) == [f"{root}/part-0.jsonl"]
    assert data_snapshot_digest(cfg) == first.snapshot.digest  # unchanged files: the same digest
    _jsonl(root / "part-9.jsonl", _rows(200, 5))
    grown = read_problems(cfg)
    assert len(grown.problems) == 45 and grown.snapshot.digest != first.snapshot.digest
    recursive = read_problems(DataConfig(source="file", path=f"{root}/**/*.parquet"))
    assert len(recursive.problems) == 30


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (None, "", "no data files in the directory"),
        ("notes.txt", "hi", "notes.txt: not a data file (.txt)"),
        ("b.json", "[{oops", "b.json: line 1, column 3: not valid JSON"),
        ("c.csv", "question,answer\nq,1\n", "c.csv: no column 'prompt'"),
    ],
)
def test_a_bad_shard_or_an_empty_directory_is_one_error_naming_the_file(tmp_path, name, content, message):
    root = tmp_path / "shards"
    root.mkdir()
    if name is not None:  # a bad shard beside a good one
        _jsonl(root / "a.jsonl", _rows(0, 5))
        (root / name).write_text(content)
    with pytest.raises(DataFileError) as err:
        read_problems(DataConfig(source="file", path=str(root)))
    assert message in str(err.value)


def test_a_glob_that_matches_nothing_names_the_pattern(tmp_path):
    with pytest.raises(DataError, match=r"no files match data\.path"):
        read_problems(DataConfig(source="file", path=str(tmp_path / "none-*.jsonl")))


def test_malformed_rows_in_shards_name_the_shard_and_line(tmp_path):
    root = tmp_path / "shards"
    _jsonl(root / "a.jsonl", _rows(0, 5))
    _jsonl(root / "b.jsonl", [*_rows(5, 2), {"prompt": "x"}])
    with pytest.raises(DataError, match=r"b\.jsonl line 3, column 'answer': answer is missing"):
        read_problems(DataConfig(source="file", path=str(root)))


def test_eval_data_is_the_held_out_set_and_its_problems_leave_training(tmp_path):
    train, held = tmp_path / "train", tmp_path / "test.jsonl"
    _jsonl(train / "a.jsonl", _rows(0, 80))
    _jsonl(train / "b.jsonl", _rows(80, 40))
    _jsonl(held, [{"prompt": f" {i}+1= ", "answer": str(i + 1)} for i in range(100, 130)] + _rows(500, 10))
    cfg = parse_config(
        {"data": {"source": "file", "path": str(train), "eval_size": 64}, "eval": {"data": {"path": str(held)}}}
    )
    prepared = prepare_data(cfg.data, cfg.eval.data)
    splits = prepared.splits
    assert len(splits.eval) == 40 and splits.eval_overlap_dropped == 20  # 100..119 are in both, spaces aside
    trained = {p.prompt for p in splits.sft + splits.train}
    assert len(trained) == 100 and not trained & {p.prompt.strip() for p in splits.eval}
    roles = [s["role"] for s in prepared.snapshot["sources"]]
    assert roles == ["training", "evaluation"] and len(prepared.snapshot["sources"][0]["files"]) == 2
    assert prepared.snapshot["digest"] == data_snapshot_digest(cfg.data, cfg.eval.data)


def test_eval_data_reads_with_the_training_prompt_template():
    cfg = DataConfig(source="file", path="t.jsonl", prompt_template="Q: {prompt}")
    held = cfg.held_out(HeldOutSourceConfig(path="e.jsonl", adapter="gsm8k"))
    assert (held.path, held.adapter, held.prompt_template, held.source) == ("e.jsonl", "gsm8k", "Q: {prompt}", "file")


def test_check_config_reads_eval_data_and_names_its_field(tmp_path):
    from essaflow.checks.preflight import check_inputs

    _jsonl(tmp_path / "train.jsonl", _rows(0, 50))
    cfg = parse_config(
        {
            "data": {"source": "file", "path": str(tmp_path / "train.jsonl"), "eval_size": 8},
            "eval": {"data": {"path": str(tmp_path / "missing.jsonl")}},
        }
    )
    report = check_inputs(cfg.model, cfg.data, cfg.eval.data)
    assert [p for p in report.problems if p.startswith("eval.data.path: ")] and "missing.jsonl" in report.problems[0]
