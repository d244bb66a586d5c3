"""The data a run read, as MLflow dataset inputs: one per source, named by the files' digest.

MLflow's dataset inputs (`mlflow.log_input`; here `MlflowClient.log_inputs`, the same call for a run that is not
the active one) show in the run's "Datasets used" with a digest; ours is the snapshot's (essaflow.data.shards), so
two runs on the same files show the same digest and a run after shards were appended shows a new one. The files
and their versions go in the dataset's profile, the counts of what was left out in its tags.
"""

from __future__ import annotations

import json
from typing import Any

from essaflow.refs import DatasetRef
from essaflow.secrets import scrub
from essaflow.tracking.runs import TrackedRun
from essaflow.tracking.server import client

SNAPSHOT_TAG = "essaflow.data_snapshot"
"""Run tag: the digest of everything the run's data read (essaflow.data.data_snapshot_digest)."""
_SHOWN_FILES = 1000  # a profile listing more is cut (MLflow keeps the profile as one text field)


def _source_type(source: str) -> str:
    if source.startswith("s3://"):
        return "s3"
    if source in ("synthetic", "reasoning_gym", "humaneval"):  # generated, or shipped by a package
        return "code"
    return "local" if source.startswith(("/", ".", "~")) else "hugging_face"


def _entity(name: str, snap: dict[str, Any]):
    from mlflow.entities import Dataset

    files = dict(list(snap.get("files", {}).items())[:_SHOWN_FILES])
    profile = {"files": len(snap.get("files", {})), "dropped_rows": snap.get("dropped_rows", 0), "versions": files}
    return Dataset(
        name=name,
        digest=snap["digest"],
        source_type=_source_type(snap["source"]),
        source=json.dumps({"uri": scrub(snap["source"])}),
        profile=json.dumps(profile, sort_keys=True),
    )


def log_dataset_inputs(run: TrackedRun, dataset: DatasetRef) -> None:
    """Each source of the dataset's snapshot as an input (context training / evaluation), plus the snapshot tags."""
    from mlflow.entities import DatasetInput, InputTag, RunTag

    inputs = [
        DatasetInput(
            _entity(dataset.name if s["role"] == "training" else f"{dataset.name}-eval", s),
            tags=[InputTag("mlflow.data.context", s["role"]), InputTag("essaflow.dataset_hash", dataset.hash)],
        )
        for s in dataset.snapshot.get("sources", [])
    ]
    c = client(run.tracking_uri)
    if inputs:
        c.log_inputs(run.run_id, datasets=inputs)
    tags = {f"essaflow.{k}": str(v) for k, v in dataset.excluded.items()}
    if dataset.snapshot:
        tags[SNAPSHOT_TAG] = dataset.snapshot["digest"]
    c.log_batch(run.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
