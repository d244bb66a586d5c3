"""One process per run: the run lease on file://, held by a heartbeat, refused to a second process naming the holder,
taken over once its holder dies (SIGKILL) and its heartbeat stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from essaflow.storage import open_store
from essaflow.training import lease

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from essaflow.storage import open_store
from essaflow.training import lease
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
    try:
        time.sleep(1.0)  # several heartbeats: the lease stays live beyond its first expiry (4 beats = 0.8 s)
        with pytest.raises(lease.LeaseHeld) as refused:
            lease.acquire(store, "run-x", heartbeat=0.2)
        msg = str(refused.value)
        assert f"pid {proc.pid}" in msg and socket.gethostname() in msg and " since 20" in msg and "run-x" in msg
        first = lease.current_lease(store, "run-x")
        assert first.live() and first.beat_at > first.since
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(1.0)  # its heartbeat stopped: the lease expires unreleased
    dead = lease.current_lease(store, "run-x")
    assert dead.stale() and not dead.released and dead.pid == proc.pid
    taken = lease.acquire(store, "run-x", heartbeat=0.2)
    try:
        assert taken.record.generation == dead.generation + 1 and taken.record.pid == os.getpid()
        assert lease.acquire(store, "run-x") is taken  # a flow retry in this process keeps its lease
    finally:
        taken.release()
    assert lease.current_lease(store, "run-x").released and not lease.current_lease(store, "run-x").live()


def test_a_released_lease_is_free_at_once_and_only_one_racer_gets_a_generation(tmp_path):
    store = open_store(f"file://{tmp_path}/store")
    first = lease.acquire(store, "run-y", heartbeat=60)
    first.release()
    second = lease.acquire(store, "run-y", heartbeat=60)  # no waiting for an expiry
    try:
        assert second.record.generation == 2
        # the conditional create behind a take-over: the same generation can be created once
        record = lease.current_lease(store, "run-y")
        key = f"{lease.lease_prefix('run-y')}/{record.generation + 1:08d}.json"
        assert store.create_json(key, {"x": 1}) is True and store.create_json(key, {"x": 2}) is False
        assert store.get_json(key) == {"x": 1}
    finally:
        second.release()
