"""Resuming a failed pipeline run: which run (`RUN_ID` or `last`), and whether this config may continue it.

A run records its config in storage when it opens (essaflow/runs/record.py). A resume reuses that run id, so the
new attempt finds the run's checkpoints (`runs/<run_id>/checkpoints/`), its MLflow run (by the `essaflow.run_id`
tag) and its cached dataset and SFT adapter (content-addressed), and continues from the newest complete checkpoint.
It is refused before any compute when the config differs in a field the run's trajectory depends on
(essaflow/checks/resume.py). This module never imports prefect.
"""

from __future__ import annotations

import logging
import re

from essaflow.checks.resume import check_resumable
from essaflow.config import ConfigError, PipelineConfig
from essaflow.runs.crashed import mark_crashed
from essaflow.runs.record import recorded_config
from essaflow.storage import ArtifactStore

log = logging.getLogger(__name__)

LAST = "last"
"""`--resume last`: the newest FAILED MLflow run of the pipeline (config.name), a run whose process died included
(essaflow/runs/crashed.py)."""


def last_failed_run(tracking_uri: str, name: str) -> str:
    """Pipeline run id of the newest FAILED MLflow run in experiment `name`; ConfigError if there is none."""
    from essaflow import tracking

    c = tracking.client(tracking_uri)
    exp = c.get_experiment_by_name(name)
    runs = []
    if exp is not None:
        runs = c.search_runs(
            [exp.experiment_id], filter_string="attributes.status = 'FAILED'", order_by=["start_time DESC"]
        )
    for r in runs:
        if r.data.tags.get(tracking.RUN_TAG):
            return r.data.tags[tracking.RUN_TAG]
    raise ConfigError(f"resume last: no failed run of pipeline {name!r} at {tracking.safe_uri(tracking_uri)}")


def resolve_run_id(resume: str, store: ArtifactStore, tracking_uri: str, cfg: PipelineConfig) -> str:
    """The run id `resume` names (`last` or an id), checked against the config it was started with and refused when
    that run completed. Answered from storage first (a malformed or unknown id, another pipeline's run), the
    tracking server after."""
    from essaflow import tracking

    if resume == LAST:  # a run killed outright is still RUNNING in MLflow: its stale lease says it died
        mark_crashed(store, tracking_uri, cfg.name)
    run_id = last_failed_run(tracking_uri, cfg.name) if resume == LAST else resume.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", run_id):
        raise ConfigError(f"resume: {run_id!r} is not a run id (letters, digits, '-', '_', '.')")
    check_resumable(recorded_config(store, run_id), cfg, run_id)
    if tracking.run_status(tracking_uri, cfg.name, run_id) == "FINISHED":
        raise ConfigError(
            f"resume {run_id}: that run completed (its MLflow run is FINISHED), so there is nothing to resume; start "
            "a new run without --resume (--force trains even when nothing is new)"
        )
    log.info("resuming run %s", run_id)
    return run_id
