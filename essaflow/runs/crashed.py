"""Runs whose process died: RUNNING in MLflow, but their lease's holder is gone (essaflow/runs/lease.py).

A process killed outright (SIGKILL, an out-of-memory kill, a lost machine) runs no failure hook, so its MLflow run
stays RUNNING. `mark_crashed` finds the pipeline's RUNNING runs whose lease holder is gone, by the rule taking a lease
uses (`lease.holder_gone`: the lease expired unreleased, or its holder on this machine has exited, found at once),
and marks them FAILED, with the reason in the `essaflow.failure` tag, so `--resume last` (the newest FAILED run)
finds them. Every run's open and every `--resume last` call it; a run that never took a lease is left as it is.
Never imports prefect.
"""

from __future__ import annotations

import logging
import time

from essaflow.runs.lease import current_lease, holder_gone, iso_time
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
        if lease is None or not holder_gone(lease, now):
            continue
        how = "stopped its heartbeat" if lease.stale(now) else "exited"
        reason = (
            f"crashed: the process ({lease.holder()}) {how} without ending the run (last heartbeat "
            f"{iso_time(lease.beat_at)})"
        )
        tracking.fail_run(tracking_uri, run_id, reason)
        log.warning("run %s: %s; marked FAILED", run_id, reason)
        found.append(run_id)
    return found
