"""Data that grows, on the real servers: fine-tunes from an s3:// prefix of shards, shards appended between runs.

The first run on the prefix registers the first version, which becomes champion. Shards are appended; the next run
trains on the new snapshot (its MLflow dataset input and Prefect summary name it), keeps every problem the first
run held out away from training, and the promotion gate decides between the two versions.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from essaflow import tracking
from essaflow.artifacts import fetch_dir
from essaflow.config import parse_config
from essaflow.data.synthetic import synthetic_problems
from tests.integration.pipeline_support import flow_run_artifacts, tiny

pytestmark = pytest.mark.integration


def _rows(problems) -> list[dict]:
    return [{"id": p.id, "prompt": p.prompt, "answer": p.answer} for p in problems]


def _parquet(rows: list[dict]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def _split_prompts(dataset_uri: str) -> dict[str, set[str]]:
    local = fetch_dir(dataset_uri)
    splits = ("sft", "train", "eval")
    return {s: {r["prompt"] for r in pq.read_table(local / f"{s}.parquet").to_pylist()} for s in splits}


def _finetune(name: str, data_uri: str):
    from flows.finetune import finetune

    data = {"source": "s3", "path": data_uri, "eval_size": 16}
    return finetune(parse_config(tiny(name=name, method="none", data=data)))


def test_a_grown_prefix_is_a_new_snapshot_and_old_eval_problems_stay_out_of_training(stack_in_process, tmp_path):
    name = f"grow-{uuid.uuid4().hex[:6]}"
    prefix = f"shards-{name}"
    shards = stack_in_process.s3.store(prefix)
    data_uri = f"s3://{stack_in_process.s3.bucket}/{prefix}/"
    problems = synthetic_problems(600)
    shards.put_bytes("part-0.jsonl", "".join(json.dumps(r) + "\n" for r in _rows(problems[:200])).encode())
    csv_rows = "\n".join(f"{r['id']},{r['prompt']},{r['answer']}" for r in _rows(problems[200:400]))
    shards.put_bytes("part-1.csv", f"id,prompt,answer\n{csv_rows}\n".encode())
    shards.put_bytes("_SUCCESS", b"")

    first = _finetune(name, data_uri)
    assert first.model_version == "1" and first.aliases == ["champion"] and "no champion" in first.decision
    assert first.data["files"] == 2 and first.data["eval_overlap_dropped"] == 0
    old = _split_prompts(first.dataset_uri)
    assert len(old["eval"]) == 16

    shards.put_bytes("part-2.parquet", _parquet(_rows(problems[400:])))  # new problems arrive as a shard
    second = _finetune(name, data_uri)
    assert second.data["files"] == 3 and second.data["snapshot"] != first.data["snapshot"]
    new = _split_prompts(second.dataset_uri)
    assert not old["eval"] & (new["sft"] | new["train"])  # nothing that judged the champion is trained on
    assert old["sft"] <= new["sft"] and old["train"] <= new["train"]  # and training problems stay put
    assert len(new["sft"] | new["train"]) > len(old["sft"] | old["train"]) + 100

    c = tracking.client(stack_in_process.mlflow.url)
    inputs = c.get_run(second.mlflow_run_id).inputs.dataset_inputs
    (training,) = [i for i in inputs if {t.key: t.value for t in i.tags}.get("mlflow.data.context") == "training"]
    assert training.dataset.digest == second.data["snapshot"] and training.dataset.source_type == "s3"
    profile = json.loads(training.dataset.profile)
    assert profile["files"] == 3 and all(uri.startswith(data_uri) for uri in profile["versions"])
    assert c.get_run(second.mlflow_run_id).data.tags["essaflow.data_snapshot"] == second.data["snapshot"]
    summary = flow_run_artifacts(second.run_id)["finetune-summary"]
    assert second.data["snapshot"] in summary and f"{data_uri}part-2.parquet" in summary

    # the gate decided between the two versions: champion moved, or the new version is the challenger
    assert second.model_version == "2" and second.aliases in (["champion"], ["challenger"])
    champion = c.get_model_version_by_alias(name, "champion")
    assert champion.version == ("2" if second.aliases == ["champion"] else "1")
    assert second.decision.startswith(second.aliases[0])
    # ... on paired evidence: both scored on the second run's eval problems under one protocol
    tags = c.get_model_version(name, "2").tags
    assert (tags["essaflow.gate_verdict"] == "promote") == (second.aliases == ["champion"])
    assert tags["essaflow.gate_champion_version"] == "1" and int(tags["essaflow.gate_n_problems"]) == len(new["eval"])
    assert tags["essaflow.gate_champion_scored"] in ("re-evaluated", "stored counts")
    low, diff, high = (float(tags[f"essaflow.gate_{k}"]) for k in ("ci_low", "diff", "ci_high"))
    assert low <= diff <= high
    evidence_file = c.download_artifacts(second.mlflow_run_id, "gate/evidence.json", str(tmp_path))
    evidence = json.loads(Path(evidence_file).read_text())
    assert evidence["diff"] == pytest.approx(diff, abs=1e-4) and evidence["n_problems"] == len(new["eval"])
    assert "promotion-gate" in flow_run_artifacts(second.run_id)
    print(f"gate: {tags['essaflow.gate_reason']} (champion {tags['essaflow.gate_champion_scored']})")
    print(f"first {first.after} {first.decision}; second {second.after} {second.decision}")


def test_an_s3_prefix_reads_its_shards_and_a_bad_one_is_one_error_naming_it(seaweedfs, monkeypatch):
    from essaflow.data import DataFileError, read_problems
    from essaflow.data.config import DataConfig

    for key, value in seaweedfs.env.items():
        monkeypatch.setenv(key, value)
    prefix = f"shards-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{seaweedfs.bucket}/{prefix}"
    store = seaweedfs.store(prefix)

    def read(path: str):
        return read_problems(DataConfig(source="s3", path=path))

    with pytest.raises(DataFileError, match="no data files under the prefix"):
        read(f"{uri}/")
    rows = _rows(synthetic_problems(30))
    store.put_bytes("a.jsonl", "".join(json.dumps(r) + "\n" for r in rows[:20]).encode())
    store.put_bytes("sub/b.parquet", _parquet(rows[20:]))
    loaded = read(f"{uri}/")
    assert len(loaded.problems) == 30 and sorted(loaded.snapshot.files) == [f"{uri}/a.jsonl", f"{uri}/sub/b.parquet"]
    assert all(":" in v for v in loaded.snapshot.files.values())  # ETag and size, from the listing
    assert len(read(f"{uri}/*.parquet").problems) == 10
    store.put_bytes("c.json", b"[{broken")
    with pytest.raises(DataFileError, match=rf"{uri}/c\.json: line 1, column 3: not valid JSON"):
        read(f"{uri}/")
