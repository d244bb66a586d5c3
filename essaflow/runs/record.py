"""The run record: the config a pipeline run was started with, stored once when it opens.

`runs/<run_id>/record/run.json` is a directory artifact (run.json + manifest, like every artifact). A retried or
resumed run keeps the record of its first attempt; a resume is checked against it (essaflow/runs/resume.py).
This module never imports prefect.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from essaflow.config import ConfigError, PipelineConfig, parse_config
from essaflow.storage import MANIFEST, ArtifactStore, StorageError

RUN_RECORD = "run.json"


def record_prefix(run_id: str) -> str:
    """runs/<run_id>/record/: the run's config as a directory artifact."""
    return f"runs/{run_id}/record"


def record_run(store: ArtifactStore, run_id: str, cfg: PipelineConfig) -> None:
    """Store the run's config once (a resumed or retried run keeps the record of its first attempt)."""
    prefix = record_prefix(run_id)
    if store.exists(f"{prefix}/{MANIFEST}"):
        return
    with tempfile.TemporaryDirectory(prefix="essaflow-record-") as tmp:
        body = {"run_id": run_id, "name": cfg.name, "config": cfg.model_dump(mode="json")}
        (Path(tmp) / RUN_RECORD).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
        store.upload_dir(Path(tmp), prefix)


def recorded_config(store: ArtifactStore, run_id: str) -> PipelineConfig:
    """The config run `run_id` was started with; ConfigError if storage holds no such run."""
    prefix = record_prefix(run_id)
    try:
        store.read_manifest(prefix)
    except StorageError as e:
        if e.kind != "incomplete":
            raise
        raise ConfigError(f"resume: no run {run_id!r} in {store.uri} (no {prefix}/{MANIFEST})") from None
    return parse_config(store.get_json(f"{prefix}/{RUN_RECORD}")["config"])
