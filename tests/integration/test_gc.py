"""`essaflow gc` on SeaweedFS with a real MLflow registry and Prefect server: after a killed run and two completed
fine-tunes of one pipeline, a gc keeping the last run deletes the crashed run, the older run's checkpoints and the
caches nothing uses; the dry run (through the CLI) lists exactly what the real one deletes, and every registered
version still loads and predicts. A registry that cannot be read deletes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from devstack import free_port
from essaflow import tracking
from essaflow.artifacts import dataset_name, publish_dataset, publish_dir, sync_checkpoint
from essaflow.config import parse_config
from essaflow.data.prepare import prepare_splits
from essaflow.refs import RunRef
from essaflow.retention import RetentionConfig
from essaflow.runs.record import record_run
from essaflow.storage import open_store
from tests.integration.pipeline_support import REPO, tiny
from tests.support.pyfunc import greedy_answers

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_disconnect_after")]


def _crashed_run(store, cfg, tracking_uri: str, tmp_path) -> str:
    """What a run killed during training leaves: its record, a checkpoint, its MLflow run RUNNING, no version."""
    run_id = uuid.uuid4().hex
    record_run(store, run_id, cfg)
    tracking.start_run(cfg, tracking_uri, run_id, {})
    ckpt = tmp_path / "1"
    ckpt.mkdir()
    (ckpt / "state.bin").write_bytes(os.urandom(200_000))
    ref = RunRef(run_id=run_id, name=cfg.name, storage_uri=store.uri, tracking_uri="", experiment_id="",
                 mlflow_run_id="")  # fmt: skip
    sync_checkpoint(store, ref, ckpt)
    return run_id


def _unused_caches(store, cfg, tmp_path) -> list[str]:
    """A dataset of a data config no run uses any more, and an SFT adapter no run starts from."""
    data = cfg.data.model_copy(update={"eval_size": 12})
    old = publish_dataset(store, dataset_name(data), prepare_splits(data), data)
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "adapter_model.safetensors").write_bytes(os.urandom(50_000))
    publish_dir(store, "adapters/sft/0123456789abcdef", sft)
    return [old.uri.removeprefix(store.uri + "/"), "adapters/sft/0123456789abcdef"]


def _cli_gc(env: dict, *args: str) -> tuple[dict, str]:
    cmd = [sys.executable, "-m", "cli.main", "gc", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_gc_frees_old_runs_and_unused_caches_and_every_registered_version_still_predicts(
    stack_in_process, tmp_path, capsys
):
    import mlflow

    from flows.finetune import finetune
    from flows.gc import gc

    name = f"gc-{uuid.uuid4().hex[:6]}"
    storage_uri = f"{stack_in_process.storage_uri}/{name}"  # a store of its own: gc sees this test's runs only
    cfg = parse_config(tiny(name=name, storage_uri=storage_uri))
    store = open_store(storage_uri)
    crashed = _crashed_run(store, cfg, stack_in_process.mlflow.url, tmp_path)
    unused = _unused_caches(store, cfg, tmp_path)
    older, newest = finetune(cfg), finetune(cfg, force=True)  # forced: nothing new would skip it
    before = store.sizes("")
    assert any(k.startswith(f"runs/{older.run_id}/checkpoints/") for k in before)

    dead = RetentionConfig(keep_runs=1, storage_uri=storage_uri, tracking_uri=f"http://127.0.0.1:{free_port()}")
    assert gc(dead, return_state=True).is_failed()  # the registry cannot be read: fail closed
    assert store.sizes("") == before

    env = stack_in_process.subprocess_env()
    dry, listing = _cli_gc(env, "--keep-runs", "1", "--storage-uri", storage_uri, "--dry-run")
    deleted = {e["prefix"] for e in dry["delete"]}
    assert deleted == {f"runs/{crashed}", f"runs/{older.run_id}/checkpoints", *unused}, dry["delete"]
    assert dry["bytes"] == sum(n for k, n in before.items() if any(k.startswith(p + "/") for p in deleted))
    assert store.sizes("") == before  # a dry run deletes nothing
    assert f"would delete {len(deleted)} prefixes, {dry['bytes']} bytes" in listing

    done = gc(RetentionConfig(keep_runs=1, storage_uri=storage_uri))
    assert [e["prefix"] for e in done["delete"]] == [e["prefix"] for e in dry["delete"]]
    assert done["bytes_freed"] == dry["bytes"] > 200_000
    after = store.sizes("")
    assert sum(before.values()) - sum(after.values()) == done["bytes_freed"]
    assert not [k for k in after if any(k.startswith(p + "/") for p in deleted)]
    with capsys.disabled():
        print(f"\ngc dry run ({name}):\n{listing}gc freed {done['bytes_freed']} bytes of {sum(before.values())}")

    for result in (older, newest):  # what each registered version references is still whole and intact
        for uri in (result.dataset_uri, result.adapter_uri):
            store.verify(uri.removeprefix(store.uri + "/"))
        store.verify(f"runs/{result.run_id}/eval/tuned")
    client = mlflow.MlflowClient()
    versions = client.search_model_versions(f"name = '{name}'")
    assert len(versions) == 2
    for uri in [f"models:/{name}/{v.version}" for v in versions] + [f"models:/{name}@champion"]:
        model = mlflow.pyfunc.load_model(uri)
        assert model.predict(["12+7=", "40-3="]) == greedy_answers(model, ["12+7=", "40-3="]), uri
