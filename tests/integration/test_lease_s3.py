"""The run lease on a real S3 server (SeaweedFS): its conditional create is the server's `If-None-Match: *`, honoured
(not the check-then-put fallback), so of many processes racing for one lease generation exactly one wins."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from essaflow.training import lease

pytestmark = pytest.mark.integration


def test_seaweedfs_honours_if_none_match_and_one_of_eight_racers_creates_the_key(s3_store):
    key = "runs/r/lease/00000001.json"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: s3_store.create_json(key, {"racer": i}), range(8)))
    assert won.count(True) == 1
    assert s3_store._shared["conditional"] is True  # the server answered the condition itself
    assert s3_store.get_json(key) == {"racer": won.index(True)}


def test_a_held_lease_on_s3_is_refused_naming_the_holder_and_free_once_released(s3_store):
    held = lease.acquire(s3_store, "run-s3", heartbeat=60)
    lease._HELD.pop("run-s3")  # as seen from another process: not this process's own lease
    try:
        with pytest.raises(lease.LeaseHeld, match=rf"run-s3 is held by .* pid {held.record.pid} since "):
            lease.acquire(s3_store, "run-s3", heartbeat=60)
    finally:
        held.release()
    again = lease.acquire(s3_store, "run-s3", heartbeat=60)
    try:
        assert again.record.generation == 2
    finally:
        again.release()
