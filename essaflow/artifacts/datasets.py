"""Datasets in storage: the three splits as Parquet under datasets/<name>/<content hash>/, and reading them back."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from essaflow.artifacts.dirs import fetch_dir
from essaflow.config import DataConfig
from essaflow.data import Problem, Splits
from essaflow.refs import DatasetRef
from essaflow.storage import ArtifactStore, StorageError
from essaflow.storage.sha256 import config_hash

SPLITS = ("sft", "train", "eval")


def dataset_name(data: DataConfig) -> str:
    """A readable folder name for the source: synthetic-arith (synthetic-countdown, synthetic-programs), gsm8k-main,
    problems (from problems.jsonl)."""
    if data.source == "synthetic":
        task = data.synthetic.task
        return "synthetic-arith" if task == "arithmetic" else f"synthetic-{task}"
    if data.source == "reasoning_gym":
        return "rg-" + "+".join(t.name for t in data.reasoning_gym.tasks)[:80]
    if data.source == "humaneval":
        return "humaneval"
    raw = (data.path or data.source).rstrip("/")
    base = raw.split("/")[-1].split("?")[0]
    base = base.split(".")[0] if data.source in ("file", "s3") else base
    if data.hf_config:
        base = f"{base}-{data.hf_config}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or data.source


def _problems_table(problems: list[Problem]):
    import pyarrow as pa

    rows = [
        {
            "id": p.id,
            "prompt": p.prompt,
            "answer": p.answer,
            "solution": p.solution,
            "metadata": json.dumps(p.metadata, sort_keys=True),
            "fields": json.dumps(p.fields, sort_keys=True, ensure_ascii=False),  # JSON: one type per column
        }
        for p in problems
    ]
    columns = ["id", "prompt", "answer", "solution", "metadata", "fields"]
    schema = pa.schema([(c, pa.string()) for c in columns])
    return pa.Table.from_pylist(rows, schema=schema)


def publish_dataset(
    store: ArtifactStore,
    name: str,
    splits: Splits,
    data_cfg: DataConfig,
    snapshot: dict[str, Any] | None = None,
    filtered: dict[str, int] | None = None,
) -> DatasetRef:
    """Write the splits as Parquet under datasets/<name>/<content hash>/ unless that artifact is already there;
    ``snapshot`` (what was read, essaflow.data.prepare) and ``filtered`` (what the data filters dropped) go into the
    reference and the first writer's info.json."""
    import pyarrow.parquet as pq

    fingerprint = splits.fingerprint()
    prefix = f"datasets/{name}/{fingerprint}"
    sizes = {s: len(getattr(splits, s)) for s in SPLITS}
    try:
        store.read_manifest(prefix)  # content-addressed: present means identical
    except StorageError as e:
        if e.kind != "incomplete":
            raise
        with tempfile.TemporaryDirectory(prefix="essaflow-dataset-") as tmp:
            for split in SPLITS:
                pq.write_table(_problems_table(getattr(splits, split)), Path(tmp) / f"{split}.parquet")
            info = {
                "name": name,
                "hash": fingerprint,
                "sizes": sizes,
                "excluded": splits.counts(),
                "filtered": filtered or {},
                "snapshot": snapshot or {},
                "config": data_cfg.model_dump(mode="json"),
            }
            (Path(tmp) / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True))
            store.upload_dir(Path(tmp), prefix)
    return DatasetRef(
        uri=store.url(prefix),
        name=name,
        hash=fingerprint,
        config_hash=config_hash(data_cfg),
        sizes=sizes,
        snapshot=snapshot or {},
        excluded=splits.counts(),
        filtered=filtered or {},
    )


def read_dataset(ref: DatasetRef) -> Splits:
    """Download (once per machine, verified) and parse the dataset's splits."""
    import pyarrow.parquet as pq

    local = fetch_dir(ref.uri)

    def problems(split: str) -> list[Problem]:
        rows = pq.read_table(local / f"{split}.parquet").to_pylist()
        for r in rows:
            r["metadata"] = json.loads(r["metadata"] or "{}")
            r["fields"] = json.loads(r.get("fields") or "{}")  # datasets stored before fields have no such column
        return [Problem(**r) for r in rows]

    splits = Splits(sft=problems("sft"), train=problems("train"), eval=problems("eval"))
    if splits.fingerprint() != ref.hash:
        raise StorageError(f"dataset at {ref.uri} does not match its content hash {ref.hash}", "integrity")
    return splits
