"""Resuming a failed pipeline run: which run (`RUN_ID` or `last`), and whether this config may continue it.

A run records its config in storage when it opens (essaflow/runs/record.py). A resume reuses that run id, so the
new attempt finds the run's checkpoints (`runs/<run_id>/checkpoints/`), its MLflow run (by the `essaflow.run_id`
tag) and its cached dataset and SFT adapter (content-addressed), and continues from the newest complete checkpoint.
It is refused before any compute when the config differs in a field the run's trajectory depends on: the
trajectory-marked fields of the method's sections (`Method.trajectory`), the data section (the splits the
trainer reads), the method and the seed. This module never imports prefect.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from essaflow.config import ConfigError, PipelineConfig, changed_trajectory
from essaflow.methods import method_of
from essaflow.runs.crashed import mark_crashed
from essaflow.runs.record import recorded_config
from essaflow.storage import ArtifactStore

log = logging.getLogger(__name__)

LAST = "last"
"""`--resume last`: the newest FAILED MLflow run of the pipeline (config.name), a run whose process died included
(essaflow/runs/crashed.py)."""


def _flat(tree: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def resume_identity(cfg: PipelineConfig) -> dict[str, Any]:
    """What a resumed run must share with the run it continues, as {dotted key: JSON value}."""
    return {
        "name": cfg.name,
        "method": cfg.method,
        "seed": cfg.seed,
        **_flat(cfg.data.model_dump(mode="json"), "data."),
        "eval.data": cfg.eval.data.model_dump(mode="json") if cfg.eval.data else None,  # the held-out source
        **method_of(cfg).trajectory(cfg),
    }


#: at most this many changed fields are listed (another pipeline's run differs in dozens)
SHOWN_CHANGES = 6


def check_resumable(saved: PipelineConfig, cfg: PipelineConfig, run_id: str) -> None:
    """ConfigError naming the fields whose value differs from the one run `run_id` was started with (the first
    SHOWN_CHANGES of them, and how many more), or only the pipeline or the method when those differ."""
    if saved.name != cfg.name:
        raise ConfigError(
            f"resume {run_id}: that is a run of pipeline {saved.name!r}, not of {cfg.name!r}: resume it with the "
            "config it was started with, or start a new run without --resume"
        )
    trained = method_of(saved)
    if trained is not method_of(cfg):  # every field of both methods' sections would differ
        raise ConfigError(
            f"resume {run_id}: that run trained method {saved.method!r}, this config method {cfg.method!r}: resume it "
            f"with method: {saved.method}, or start a new run without --resume"
        )
    before, now = resume_identity(saved), resume_identity(cfg)
    changed = sorted(set(changed_trajectory(before, now)) | (set(before) ^ set(now)))
    if changed:
        diffs = "; ".join(f"{k}: {_short(before.get(k))} -> {_short(now.get(k))}" for k in changed[:SHOWN_CHANGES])
        more = f"; and {len(changed) - SHOWN_CHANGES} more" if len(changed) > SHOWN_CHANGES else ""
        raise ConfigError(
            f"resume {run_id}: the config differs from the run's in {len(changed)} field"
            f"{'s' if len(changed) > 1 else ''} its trajectory depends on ({diffs}{more}); restore them, or start a "
            "new run without --resume"
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
