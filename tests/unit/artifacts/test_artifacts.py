"""Stage references and their storage round trips on a file:// store: datasets by content, checkpoints (a trainer's
own manifest.json included), eval reports, stage timing, and which storage URI a run uses."""

from __future__ import annotations

import json

import pytest

from essaflow.artifacts import (
    dataset_name,
    latest_stored_checkpoint,
    manifest_digest,
    publish_dataset,
    publish_eval,
    read_dataset,
    read_eval_report,
    restore_checkpoint,
    storage_uri_for,
    sync_checkpoint,
)
from essaflow.config import DataConfig, EvalConfig, PipelineConfig, SamplingConfig
from essaflow.data import Problem, Splits
from essaflow.judging.evaluation import EvalReport
from essaflow.refs import RunRef
from essaflow.storage import open_store
from essaflow.timing import Timer


def _splits() -> Splits:
    p = [Problem(id=str(i), prompt=f"{i}+1=", answer=str(i + 1), metadata={"k": i}) for i in range(9)]
    return Splits(sft=p[:3], train=p[3:6], eval=p[6:])


def _run(store) -> RunRef:
    return RunRef(
        run_id="r1", name="t", storage_uri=store.uri, tracking_uri="sqlite:///x", experiment_id="1", mlflow_run_id="m"
    )


def test_a_dataset_is_stored_by_content_and_read_back_identically(tmp_path):
    store = open_store(f"file://{tmp_path}/store")
    splits = _splits()
    ref = publish_dataset(store, "arith", splits, DataConfig())
    again = publish_dataset(store, "arith", splits, DataConfig())  # content-addressed: a no-op
    assert ref == again and ref.uri.endswith(f"datasets/arith/{splits.fingerprint()}")
    assert ref.sizes == {"sft": 3, "train": 3, "eval": 3}
    back = read_dataset(ref)
    assert back == splits and back.eval[0].metadata == {"k": 6}
    store.verify(f"datasets/arith/{ref.hash}")


def test_checkpoints_keep_the_trainers_own_manifest_and_restore_the_newest(tmp_path):
    store = open_store(f"file://{tmp_path}/store")
    run = _run(store)
    for step in ("00000001", "00000002"):
        ckpt = tmp_path / "ckpt" / step
        ckpt.mkdir(parents=True)
        (ckpt / "manifest.json").write_text(json.dumps({"generation": int(step)}))  # as ESSA writes it
        (ckpt / "state.npz").write_bytes(step.encode())
        sync_checkpoint(store, run, ckpt)
    assert latest_stored_checkpoint(store, run) == "00000002"
    assert restore_checkpoint(store, run, tmp_path / "restored") == "00000002"
    assert json.loads((tmp_path / "restored" / "00000002" / "manifest.json").read_text()) == {"generation": 2}
    assert sorted(p.name for p in (tmp_path / "restored").iterdir()) == ["00000002"]


def test_an_eval_report_round_trips_with_its_per_problem_counts(tmp_path):
    store = open_store(f"file://{tmp_path}/store")
    report = EvalReport(3, 4, 0.5, {"1": 0.25, "2": 0.4, "4": 0.6}, [0, 1, 4], ["a", "b", "c"], 1.0, 10.0)
    ref = publish_eval(store, _run(store), "base", report, {"eval": EvalConfig().model_dump(), "sampling": {}})
    assert ref.summary == {"greedy": 0.5, "pass@1": 0.25, "pass@2": 0.4, "pass@4": 0.6}
    assert set(store.verify("runs/r1/eval/base")["files"]) == {"passk.json", "passk.png", "samples.jsonl.gz"}
    assert read_eval_report(ref) == report
    # a retried evaluation replaces its own report
    publish_eval(store, _run(store), "base", report, {"sampling": SamplingConfig().model_dump()})
    assert manifest_digest(store.read_manifest("runs/r1/eval/base"))


def test_timer_parts_nest_without_double_counting():
    t = Timer()
    with t.part("compute"), t.part("storage"):
        sum(range(200000))
    parts = t.timings()
    assert parts["storage"] > 0 and parts["compute"] >= 0
    assert parts["compute"] + parts["storage"] <= parts["total"] + 1e-3


def test_the_default_file_store_yields_to_essaflow_storage_uri(monkeypatch):
    monkeypatch.setenv("ESSAFLOW_STORAGE_URI", "s3://bucket/x")
    default = PipelineConfig().storage_uri
    assert storage_uri_for(default) == "s3://bucket/x"
    assert storage_uri_for("file:///data") == "file:///data"
    monkeypatch.delenv("ESSAFLOW_STORAGE_URI")
    assert storage_uri_for(default) == default


@pytest.mark.parametrize(
    "data, name",
    [
        (DataConfig(), "synthetic-arith"),
        (DataConfig(source="hf", path="openai/gsm8k", hf_config="main"), "gsm8k-main"),
        (DataConfig(source="file", path="/data/my problems.jsonl"), "my-problems"),
    ],
)
def test_dataset_names_are_readable(data, name):
    assert dataset_name(data) == name
