"""The run lease on file://: a released lease is free at once, and the conditional create behind a take-over gives
one generation to one racer. A second process refused and a dead holder taken over:
tests/integration/test_lease_holder.py."""

from __future__ import annotations

from essaflow.runs import lease
from essaflow.storage import open_store


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
