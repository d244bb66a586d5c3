"""One process per run: the run lease on file://, held by a heartbeat, refused to a second process naming the holder,
taken over once its holder dies (SIGKILL) and its heartbeat stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from essaflow.runs import lease
from essaflow.storage import open_store
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from essaflow.storage import open_store
from essaflow.runs import lease
held = lease.acquire(open_store(sys.argv[1]), "run-x", heartbeat=float(sys.argv[2]))
print("held", flush=True)
time.sleep(600)
"""


def _holder(store_uri: str, heartbeat: float) -> subprocess.Popen:
    """A second process that takes run-x's lease and keeps it (heartbeat running) until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, store_uri, str(heartbeat)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_host_pid_and_since_until_the_holder_dies(tmp_path):
    uri = f"file://{tmp_path}/store"
    store = open_store(uri)
    proc = _holder(uri, heartbeat=0.2)
    taken_at = lease.current_lease(store, "run-x")

    def renewed_past_its_first_expiry():  # 4 beats = 0.8 s after the take; only heartbeats keep it live
        newest = lease.current_lease(store, "run-x")
        return newest if newest.beat_at > taken_at.expires_at else None

    try:
        renewed = wait_until(renewed_past_its_first_expiry, 30, "a heartbeat after the lease's first expiry")
        with pytest.raises(lease.LeaseHeld) as refused:
            lease.acquire(store, "run-x", heartbeat=0.2)
        msg = str(refused.value)
        assert f"pid {proc.pid}" in msg and socket.gethostname() in msg and " since 20" in msg and "run-x" in msg
        assert renewed.generation == taken_at.generation and renewed.expires_at > taken_at.expires_at
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def expired():  # its heartbeat stopped: the lease expires unreleased
        newest = lease.current_lease(store, "run-x")
        return newest if newest.stale() else None

    dead = wait_until(expired, 30, "the killed holder's lease to expire")
    assert not dead.released and dead.pid == proc.pid
    taken = lease.acquire(store, "run-x", heartbeat=0.2)
    try:
        assert taken.record.generation == dead.generation + 1 and taken.record.pid == os.getpid()
        assert lease.acquire(store, "run-x") is taken  # a flow retry in this process keeps its lease
    finally:
        taken.release()
    assert lease.current_lease(store, "run-x").released and not lease.current_lease(store, "run-x").live()


def test_a_holder_on_this_machine_killed_outright_is_gone_at_once_for_the_lease_and_for_resume_last(tmp_path):
    """One rule for "the holder is gone" (lease.holder_gone): its lease still has two minutes to run, but its process
    on this machine has exited, so the run is marked FAILED, found by `--resume last` and its lease taken, at once."""
    from essaflow import tracking
    from essaflow.config import load_config
    from essaflow.runs.crashed import mark_crashed
    from essaflow.runs.record import record_run
    from essaflow.runs.resume import resolve_run_id

    uri, mlflow_uri = f"file://{tmp_path}/store", f"sqlite:///{tmp_path}/mlflow.db"
    store, cfg = open_store(uri), load_config(None, ["name=killed-holder"])
    record_run(store, "run-x", cfg)
    tracking.start_run(cfg, mlflow_uri, "run-x", {})  # RUNNING, as the killed process leaves it
    proc = _holder(uri, heartbeat=30.0)  # the default heartbeat: the lease expires 2 minutes after the take
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = lease.current_lease(store, "run-x")
    assert left.pid == proc.pid and not left.released and not left.stale() and lease.holder_gone(left)
    assert resolve_run_id("last", store, mlflow_uri, cfg) == "run-x"  # at once, not after the expiry
    failed = tracking.client(mlflow_uri).search_runs(
        [tracking.client(mlflow_uri).get_experiment_by_name("killed-holder").experiment_id]
    )[0]  # fmt: skip
    assert failed.info.status == "FAILED" and f"pid {proc.pid}" in failed.data.tags[tracking.FAILURE_TAG]
    assert "exited without ending the run" in failed.data.tags[tracking.FAILURE_TAG]
    assert mark_crashed(store, mlflow_uri, "killed-holder") == []  # marked once
    taken = lease.acquire(store, "run-x")
    try:
        assert taken.record.generation == left.generation + 1 and taken.record.pid == os.getpid()
    finally:
        taken.release()
