"""Runs whose process died: RUNNING in MLflow, but their lease's heartbeat stopped (essaflow/runs/lease.py).

A process killed outright (SIGKILL, an out-of-memory kill, a lost machine) runs no failure hook, so its MLflow run
stays RUNNING. `mark_crashed` finds the pipeline's RUNNING runs whose lease has expired unreleased and marks them
FAILED, with the reason in the `essaflow.failure` tag, so `--resume last` (the newest FAILED run) finds them. Every
run's open and every `--resume last` call it; a run that never took a lease is left as it is. Never imports prefect.
"""

from __future__ import annotations

import logging
import time

from essaflow.runs.lease import current_lease, iso_time
from essaflow.storage import ArtifactStore

log = logging.getLogger(__name__)


def mark_crashed(store: ArtifactStore, tracking_uri: str, name: str) -> list[str]:
    """Mark FAILED every RUNNING MLflow run of pipeline `name` whose lease in `store` is stale; their run ids."""
    from essaflow import tracking

    c = tracking.client(tracking_uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        return []
    found = []
    now = time.time()
    for r in c.search_runs([exp.experiment_id], filter_string="attributes.status = 'RUNNING'"):
        run_id = r.data.tags.get(tracking.RUN_TAG)
        lease = current_lease(store, run_id) if run_id else None
        if lease is None or not lease.stale(now):
            continue
        reason = (
            f"crashed: the process ({lease.holder()}) stopped its heartbeat at {iso_time(lease.beat_at)} "
            f"(lease expired {iso_time(lease.expires_at)}) without ending the run"
        )
        tracking.fail_run(tracking_uri, run_id, reason)
        log.warning("run %s: %s; marked FAILED", run_id, reason)
        found.append(run_id)
    return found
