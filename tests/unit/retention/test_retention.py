"""What gc plans on a file:// store, without servers: the last N runs of each pipeline stay whole, an older run
goes whole unless a registered version references it (then only its checkpoints go, unless the version references
them too), and what gc cannot read is kept (a run without a record, a dataset without info.json, every SFT adapter
when a kept run's SFT start cannot be worked out, the lineage of a run the registry's server does not know). The
sweep frees what the plan says. (The same plan on S3 against
a real registry: tests/integration/test_gc.py.)"""

from __future__ import annotations

import os
import uuid

import pytest
from typer.testing import CliRunner

from essaflow.artifacts import publish_dir
from essaflow.config import PipelineConfig
from essaflow.retention import VersionRefs, plan_gc, sweep
from essaflow.runs.record import record_run
from essaflow.storage import open_store


@pytest.fixture
def store(tmp_path):
    return open_store(f"file://{tmp_path / 'store'}")


def _put(store, prefix: str, tmp_path, size: int = 1000) -> None:
    """A committed directory artifact of `size` random bytes at `prefix`."""
    local = tmp_path / uuid.uuid4().hex
    local.mkdir()
    (local / "blob.bin").write_bytes(os.urandom(size))
    publish_dir(store, prefix, local)


def _run(store, name: str, tmp_path, checkpoint_bytes: int = 5000) -> str:
    """A run's record, a checkpoint and an adapter, as a pipeline run leaves them."""
    run_id = uuid.uuid4().hex
    record_run(store, run_id, PipelineConfig(name=name))
    _put(store, f"runs/{run_id}/checkpoints/1", tmp_path, checkpoint_bytes)
    _put(store, f"runs/{run_id}/adapter", tmp_path)
    return run_id


def _deleted(plan) -> set[str]:
    return {e.prefix for e in plan.delete}


def test_the_last_runs_stay_an_unregistered_older_run_goes_a_registered_one_loses_its_checkpoints(store, tmp_path):
    a1, a2, a3, a4 = (_run(store, "a", tmp_path) for _ in range(4))
    b1 = _run(store, "b", tmp_path)
    registered = [VersionRefs("a v1", a2, (store.url(f"runs/{a2}/adapter"),))]
    plan = plan_gc(store, registered, keep_runs=2, is_tracked=lambda run_id: True)
    assert _deleted(plan) == {f"runs/{a1}", f"runs/{a2}/checkpoints"}
    kept = {e.prefix: e.why for e in plan.keep}
    assert {f"runs/{a3}", f"runs/{a4}", f"runs/{b1}", f"runs/{a2}"} <= set(kept)
    assert "a v1 needs it" in kept[f"runs/{a2}"]
    checkpoint_bytes = sum(store.sizes(f"runs/{a2}/checkpoints").values())
    assert next(e for e in plan.delete if e.prefix == f"runs/{a2}/checkpoints").bytes == checkpoint_bytes
    before = sum(store.sizes("").values())
    freed = sweep(store, plan)
    assert freed == plan.bytes and sum(store.sizes("").values()) == before - freed
    assert store.list(f"runs/{a1}") == [] and store.list(f"runs/{a2}/checkpoints") == []
    assert store.list(f"runs/{a2}/adapter") and store.list(f"runs/{a3}/checkpoints")


def test_a_version_referencing_a_checkpoint_keeps_it(store, tmp_path):
    old, _new = _run(store, "a", tmp_path), _run(store, "a", tmp_path)
    version = VersionRefs("a v1", None, (store.url(f"runs/{old}/checkpoints/1"),))
    plan = plan_gc(store, [version], keep_runs=1, is_tracked=lambda run_id: True)
    assert _deleted(plan) == set()
    assert {e.prefix: e.why for e in plan.keep}[f"runs/{old}"] == "a registered version needs it"


def test_an_older_run_the_registry_server_does_not_know_keeps_its_lineage(store, tmp_path):
    """gc pointed at another registry (or an empty one) sees no version of the run: it may be registered there."""
    old, _new = _run(store, "a", tmp_path), _run(store, "a", tmp_path)
    plan = plan_gc(store, [], keep_runs=1, is_tracked=lambda run_id: run_id != old)
    assert _deleted(plan) == {f"runs/{old}/checkpoints"}
    assert "not tracked by this registry's server" in {e.prefix: e.why for e in plan.keep}[f"runs/{old}"]


def test_what_cannot_be_read_is_kept(store, tmp_path):
    _run(store, "a", tmp_path)
    orphan = uuid.uuid4().hex
    _put(store, f"runs/{orphan}/checkpoints/1", tmp_path)  # no record: gc cannot tell whose run it is
    _put(store, "datasets/x/0123456789abcdef", tmp_path)  # no info.json: gc cannot tell what config made it
    _put(store, "adapters/sft/feedfacefeedface", tmp_path)  # the kept run's dataset is gone: its SFT key unknown
    _put(store, "mlflow/1/model", tmp_path)  # not the pipeline's layout: never touched
    plan = plan_gc(store, [], keep_runs=1, is_tracked=lambda run_id: True)
    assert _deleted(plan) == set()
    kept = {e.prefix: e.why for e in plan.keep}
    assert "record unreadable" in kept[f"runs/{orphan}"]
    assert "info.json unreadable" in kept["datasets/x/0123456789abcdef"]
    assert "cannot be worked out" in kept["adapters/sft/feedfacefeedface"]
    assert not any(p.startswith("mlflow") for p in kept)


def test_the_cli_refuses_a_retention_of_no_runs():
    from cli.main import app

    out = CliRunner().invoke(app, ["gc", "--keep-runs", "0"])
    assert out.exit_code == 2
    assert "keep_runs: Input should be greater than or equal to 1" in out.output
