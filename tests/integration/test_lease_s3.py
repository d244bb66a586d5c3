"""The run lease on a real S3 server (SeaweedFS): its conditional create is the server's `If-None-Match: *`, honoured
(not the check-then-put fallback), so of many processes racing for one lease generation exactly one wins; a second
process asking for a held lease is refused."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from essaflow.runs import lease

pytestmark = pytest.mark.integration

FALLBACK = "does not support conditional writes; falling back to check-then-put"  # what S3Store logs then


def test_seaweedfs_honours_if_none_match_and_one_of_eight_racers_creates_the_key(s3_store, caplog):
    key = "runs/r/lease/00000001.json"
    with caplog.at_level(logging.INFO, logger="essaflow.storage"), ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: s3_store.create_json(key, {"racer": i}), range(8)))
    assert won.count(True) == 1
    assert FALLBACK not in caplog.text  # the server answered the condition itself
    assert s3_store.get_json(key) == {"racer": won.index(True)}


SECOND_PROCESS = """
import sys
from essaflow.runs import lease
from essaflow.storage import open_store
try:
    lease.acquire(open_store(sys.argv[1]), "run-s3", heartbeat=60)
except lease.LeaseHeld as e:
    print("refused:", e)
else:
    print("taken")
"""


def _second_process_takes(server, store) -> str:
    """What another process gets when it asks for run-s3's lease on the same bucket and prefix."""
    env = {**os.environ, **server.env}
    out = subprocess.run([sys.executable, "-c", SECOND_PROCESS, store.uri], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_held_lease_on_s3_is_refused_naming_the_holder_and_free_once_released(seaweedfs, s3_store):
    held = lease.acquire(s3_store, "run-s3", heartbeat=60)
    try:
        answer = _second_process_takes(seaweedfs, s3_store)
        assert answer.startswith("refused: "), answer
        assert re.search(rf"run-s3 is held by .* pid {held.record.pid} since ", answer), answer
    finally:
        held.release()
    again = lease.acquire(s3_store, "run-s3", heartbeat=60)
    try:
        assert again.record.generation == 2
    finally:
        again.release()
