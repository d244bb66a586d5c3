"""A run killed outright (SIGKILL) on this machine is resumed by `essaflow run --resume last` at once, from its last
checkpoint: its lease still has two minutes to run (the default 30 s heartbeat), but its holder's process is gone,
and one rule (essaflow.runs.lease.holder_gone) says so both to crashed-run detection and to taking the lease.

Real Prefect, MLflow and SeaweedFS servers; ESSA scores in process (no Ray), so the test needs no cluster. A
deployment run killed in a worker's flow-run process is tests/integration/test_unattended.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from essaflow import tracking
from essaflow.runs.lease import current_lease
from tests.integration.pipeline_support import REPO, tiny
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
#: a tiny generation takes a fraction of a second: 48 leave time to see the first checkpoint and kill mid-training
GENERATIONS = 48


def _essaflow(args: list[str], env: dict[str, str], cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_a_run_killed_with_sigkill_is_resumed_by_resume_last_at_once_from_its_last_checkpoint(
    prefect_server, mlflow_server, seaweedfs, tmp_path
):
    name = f"killed-{uuid.uuid4().hex[:6]}"
    home = tmp_path / "client-home"
    env = {
        **os.environ, **seaweedfs.env,
        "PREFECT_API_URL": f"{prefect_server.url}/api", "PREFECT_HOME": str(home),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "storage"), "MLFLOW_TRACKING_URI": mlflow_server.url,
    }  # fmt: skip
    for key in ("RAY_ADDRESS", "ESSAFLOW_HEARTBEAT_S"):  # in process; the default heartbeat: a 2-minute lease
        env.pop(key, None)
    essa = {
        **tiny()["essa"],
        "generations": GENERATIONS,
        "workers": {**tiny()["essa"].get("workers", {}), "ray": False},
    }
    cfg = tiny(name=name, method="essa", essa=essa, storage_uri=f"s3://{seaweedfs.bucket}/{name}")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    store = seaweedfs.store(name)

    victim = _essaflow(["run", "run.yaml", "--no-progress"], env, tmp_path)
    committed = re.compile(r"runs/([0-9a-f-]+)/checkpoints/[^/]+/manifest\.json$")

    def checkpoint() -> str | None:
        assert victim.poll() is None, victim.communicate()[1][-3000:]  # the run ended before it could be killed
        return next((k for k in store.list("runs") if committed.search(k)), None)

    key = wait_until(checkpoint, 600, "a committed checkpoint of the run", every=0.5)
    run_id = committed.search(key).group(1)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    left = current_lease(store, run_id)
    assert left.pid == victim.pid and not left.released and not left.stale()
    assert not store.list(f"runs/{run_id}/adapter"), "the run had finished training before it was killed"

    t0 = time.monotonic()
    resumer = _essaflow(["run", "run.yaml", "--resume", "last", "--no-progress"], env, tmp_path)
    out, err = resumer.communicate(timeout=600)
    assert resumer.returncode == 0, err[-3000:]
    line = json.loads(out.strip().splitlines()[-1])
    assert line["run_id"] == run_id and line["state"] == "completed"
    assert line["training"]["resumed_from"] is not None and line["training"]["steps"] == GENERATIONS
    taken = store.get_json(f"runs/{run_id}/lease/{left.generation + 1:08d}.json")
    assert taken["pid"] == resumer.pid and taken["since"] < left.expires_at  # before the killed lease expired
    c = tracking.client(mlflow_server.url)
    runs = c.search_runs([c.get_experiment_by_name(name).experiment_id],
                         filter_string=f"tags.`{tracking.RUN_TAG}` = '{run_id}'")  # fmt: skip
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "marked FAILED" in err and f"pid {victim.pid}" in err and "exited without ending the run" in err
    print(f"killed run {run_id[:8]} at its checkpoint {key.rsplit('/', 2)[-2]}; resumed from "
          f"{line['training']['resumed_from']} in {time.monotonic() - t0:.0f}s, "
          f"{left.expires_at - taken['since']:.0f}s before its lease would have expired")  # fmt: skip
