"""Nothing new, nothing run, and runs whose process died, on MLflow's sqlite backend (no server): which inputs make a
run skip, and a RUNNING run with a stale lease marked FAILED so `--resume last` finds it."""

from __future__ import annotations

import time
from dataclasses import asdict

import pytest

from essaflow import tracking
from essaflow.config import ConfigError, load_config
from essaflow.refs import DatasetRef
from essaflow.runs import lease
from essaflow.runs.crashed import mark_crashed
from essaflow.runs.resume import last_failed_run, resolve_run_id
from essaflow.runs.skip import (
    OUTCOME_TAG,
    SKIPPED,
    TRAINED,
    input_tags,
    last_completed,
    run_inputs,
    unchanged_since,
)
from essaflow.storage import open_store
from tests.support.waiting import wait_until


def _cfg(*overrides: str):
    return load_config(None, ["method=essa", "name=nn-test", *overrides])


def _dataset(digest: str = "a" * 16) -> DatasetRef:
    return DatasetRef(uri="file:///x", name="synthetic-arith", hash=digest, config_hash="c", sizes={})


def _lease_left_by_a_killed_process(store, run_id: str) -> None:
    """What a SIGKILLed holder leaves in storage: its lease, never released, its last heartbeat a minute ago."""
    beat = time.time() - 60
    record = lease.LeaseRecord(
        run_id=run_id, generation=1, host="lost-machine", pid=4242, since=beat - 10, beat_at=beat,
        expires_at=beat + lease.MISSED_BEATS * 0.05, released=False, token="killed",
    )  # fmt: skip
    assert store.create_json(f"{lease.lease_prefix(run_id)}/00000001.json", asdict(record))
    assert lease.current_lease(store, run_id) == record and record.stale()


def _finished_run(uri: str, run_id: str, inputs: dict[str, str], outcome: str = TRAINED) -> None:
    cfg = _cfg()
    run = tracking.start_run(cfg, uri, run_id, {**input_tags(inputs), OUTCOME_TAG: outcome})
    tracking.finish_run(run)


def test_the_same_data_config_and_base_skip_and_any_change_trains(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    inputs = run_inputs(_cfg(), _dataset())
    assert set(inputs) == {"data", "config", "base"} and inputs["base"].startswith("builtin:tiny@")
    assert unchanged_since(inputs, last_completed(uri, "nn-test")) is None  # no completed run yet
    _finished_run(uri, "r-trained", inputs)
    ended_ms = time.time_ns() // 1_000_000  # the skipped run must end later (MLflow keeps milliseconds)
    wait_until(lambda: time.time_ns() // 1_000_000 > ended_ms, 5, "the next millisecond", every=0.001)
    _finished_run(uri, "r-skipped", inputs, outcome=SKIPPED)  # a skipped run is no completed run
    last = last_completed(uri, "nn-test")
    assert last.run_id == "r-trained" and last.inputs == inputs
    reason = unchanged_since(inputs, last)
    assert "nothing new since run r-trained" in reason and inputs["data"] in reason and "force" in reason
    # where it runs is not an input; what it computes is
    assert run_inputs(_cfg("tracking_uri=sqlite:///other.db", "storage_uri=file:///y"), _dataset()) == inputs
    for changed in (
        run_inputs(_cfg(), _dataset("b" * 16)),  # a new data snapshot
        run_inputs(_cfg("essa.generations=7"), _dataset()),  # a new budget
    ):
        assert unchanged_since(changed, last) is None
    # the base by content: the same directory with new weights copied over it is a new base
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"1")
    local = run_inputs(_cfg(f"model.name_or_path={base}"), _dataset())
    (base / "model.safetensors").write_bytes(b"22")
    retrained = run_inputs(_cfg(f"model.name_or_path={base}"), _dataset())
    assert retrained["config"] == local["config"] and retrained["base"] != local["base"]


def test_a_running_run_whose_lease_went_stale_is_marked_failed_and_found_by_resume_last(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    store = open_store(f"file://{tmp_path}/store")
    cfg = _cfg()
    from essaflow.runs.record import record_run

    for run_id in ("r-dead", "r-alive"):
        record_run(store, run_id, cfg)
        tracking.start_run(cfg, uri, run_id, {})  # RUNNING, as a killed process leaves it
    alive = lease.acquire(store, "r-alive", heartbeat=60)
    _lease_left_by_a_killed_process(store, "r-dead")
    try:
        with pytest.raises(ConfigError, match="no failed run"):
            last_failed_run(uri, "nn-test")  # RUNNING runs are invisible to `last` ...
        assert resolve_run_id("last", store, uri, cfg) == "r-dead"  # ... until their stale lease is noticed
        c = tracking.client(uri)
        runs = {
            r.data.tags[tracking.RUN_TAG]: r for r in c.search_runs([c.get_experiment_by_name("nn-test").experiment_id])
        }
        assert runs["r-dead"].info.status == "FAILED" and runs["r-alive"].info.status == "RUNNING"
        reason = runs["r-dead"].data.tags[tracking.FAILURE_TAG]
        assert reason.startswith("crashed: ") and "stopped its heartbeat" in reason and "pid " in reason
        assert mark_crashed(store, uri, "nn-test") == []  # marked once
    finally:
        alive.release()
