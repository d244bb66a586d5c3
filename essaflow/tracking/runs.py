"""One MLflow run per pipeline run: started (or found again by its `essaflow.run_id` tag, so a retried stage logs
into the same run), tagged, finished or failed.

Params are the flattened config, never a credential (secret-looking keys are dropped, URI user-info and the values
of credential environment variables are masked). Never imports prefect.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from essaflow.config import PipelineConfig
from essaflow.methods import method_of
from essaflow.refs import RunRef
from essaflow.secrets import is_secret, safe_uri, scrub
from essaflow.tracking.server import client

log = logging.getLogger(__name__)

RUN_TAG = "essaflow.run_id"
FAILURE_TAG = "essaflow.failure"  # why a failed run failed (stage: error), removed when it is resumed


def flat_params(cfg: PipelineConfig) -> dict[str, str]:
    """The config as dotted `section.key -> value` params; secret-looking keys dropped, values scrubbed."""
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        if is_secret(prefix):
            return
        value = json.dumps(node) if isinstance(node, (list, tuple)) else str(node)
        out[prefix] = scrub(safe_uri(value) if "://" in value else value)[:6000]

    walk("", cfg.model_dump(mode="json"))
    out.update(method_of(cfg).params(cfg))  # ESSA: how the result was obtained, beside the fitness it names
    return out


@dataclass(frozen=True)
class TrackedRun:
    """Where one pipeline run is recorded in MLflow."""

    tracking_uri: str
    experiment_id: str
    run_id: str

    @property
    def url(self) -> str | None:
        if urlsplit(self.tracking_uri).scheme in ("http", "https"):
            return f"{safe_uri(self.tracking_uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return None


def tracked(run: RunRef) -> TrackedRun:
    """Where pipeline run `run` is recorded in MLflow."""
    return TrackedRun(run.tracking_uri, run.experiment_id, run.mlflow_run_id)


def git_commit() -> str:
    """The source commit (ESSAFLOW_GIT_COMMIT wins; 'unknown' outside a git checkout)."""
    if os.environ.get("ESSAFLOW_GIT_COMMIT"):
        return os.environ["ESSAFLOW_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _experiment(c, name: str, tracking_uri: str) -> str:
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    location = None
    if urlsplit(tracking_uri).scheme == "sqlite":  # keep local artifacts beside the database, not in ./mlruns
        location = (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").absolute().as_uri()
    from mlflow.exceptions import MlflowException

    try:
        return c.create_experiment(name, artifact_location=location)
    except MlflowException:  # created concurrently
        return c.get_experiment_by_name(name).experiment_id


def start_run(cfg: PipelineConfig, tracking_uri: str, run_id: str, tags: dict[str, str]) -> TrackedRun:
    """The MLflow run of pipeline run `run_id`: found by tag (retries, a resume) and RUNNING again, or created
    with params and tags."""
    c = client(tracking_uri)
    exp_id = _experiment(c, cfg.name, tracking_uri)
    found = c.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG}` = '{run_id}'", max_results=1)
    if found:  # a retried stage, a flow retry or a resume: the same MLflow run, RUNNING again
        info = found[0].info
        if info.status != "RUNNING":
            c.update_run(info.run_id, status="RUNNING")
            if FAILURE_TAG in found[0].data.tags:
                c.delete_tag(info.run_id, FAILURE_TAG)
        return TrackedRun(tracking_uri, exp_id, info.run_id)
    from mlflow.entities import Param

    all_tags = {RUN_TAG: run_id, "mlflow.runName": run_id[:8], **tags}
    run = c.create_run(exp_id, tags={k: scrub(str(v)) for k, v in all_tags.items()})
    params = [Param(k, v) for k, v in flat_params(cfg).items()]
    for i in range(0, len(params), 100):
        c.log_batch(run.info.run_id, params=params[i : i + 100])
    log.info("MLflow run %s (experiment %s) at %s", run.info.run_id, exp_id, safe_uri(tracking_uri))
    return TrackedRun(tracking_uri, exp_id, run.info.run_id)


def run_status(tracking_uri: str, name: str, run_id: str) -> str | None:
    """The MLflow status (RUNNING, FINISHED, FAILED, KILLED) of pipeline run `run_id` in experiment `name`; None
    when it has no MLflow run there."""
    c = client(tracking_uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        return None
    found = c.search_runs([exp.experiment_id], filter_string=f"tags.`{RUN_TAG}` = '{run_id}'", max_results=1)
    return found[0].info.status if found else None


def set_tags(run: TrackedRun, tags: dict[str, Any]) -> None:
    from mlflow.entities import RunTag

    c = client(run.tracking_uri)
    c.log_batch(run.run_id, tags=[RunTag(k, scrub(str(v))) for k, v in tags.items()])


def finish_run(run: TrackedRun, status: str = "FINISHED") -> None:
    client(run.tracking_uri).set_terminated(run.run_id, status)


def fail_run(tracking_uri: str, pipeline_run_id: str, reason: str = "") -> None:
    """Mark the MLflow run of a pipeline run FAILED (if it was ever opened), with `reason` as FAILURE_TAG."""
    c = client(tracking_uri)
    exp_ids = [e.experiment_id for e in c.search_experiments()]
    if not exp_ids:
        return
    for r in c.search_runs(exp_ids, filter_string=f"tags.`{RUN_TAG}` = '{pipeline_run_id}'"):
        if reason:  # MLflow caps a tag value at 5000 characters
            c.set_tag(r.info.run_id, FAILURE_TAG, scrub(reason)[:4000])
        if r.info.status == "RUNNING":
            c.set_terminated(r.info.run_id, "FAILED")
