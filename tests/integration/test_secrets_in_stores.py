"""No planted credential reaches any store a run writes to: a run and a gc that fail on an S3 endpoint URL carrying
a password (nothing listens there: the commands' preflight says so; the gc flow run as a deployment runs it, with
no preflight, fails inside its task), then a gc that succeeds with a password in its MLflow URI; every file of
Prefect's server (its sqlite database, the `log` table included), of MLflow's server, of the client's Prefect home
and of the working directory, the run's storage prefix, and each command's stdout (the JSON line) and stderr are
searched for the password, as the secrets sweep did."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from devstack import free_port
from tests.integration.pipeline_support import REPO, leaks, tiny
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _files(*roots: Path) -> dict[str, bytes]:
    """{path: bytes} of every regular file under the roots (a database's -wal and -journal files included)."""
    return {str(p): p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def _essaflow(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return proc, time.monotonic() - t0


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def test_a_password_in_the_s3_endpoint_url_reaches_no_store_from_a_failed_run_and_gc(
    prefect_server, mlflow_server, seaweedfs, tmp_path
):
    password = "planted-" + uuid.uuid4().hex
    dead = free_port()
    home = tmp_path / "client-home"
    env = {
        **__import__("os").environ, **seaweedfs.env,
        "ESSAFLOW_S3_ENDPOINT_URL": f"http://sweep-user:{password}@127.0.0.1:{dead}",
        "PREFECT_API_URL": f"{prefect_server.url}/api", "PREFECT_HOME": str(home),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "storage"), "MLFLOW_TRACKING_URI": mlflow_server.url,
        "PREFECT_LOGGING_EXTRA_LOGGERS": "essaflow", "ESSAFLOW_HEARTBEAT_S": "1",
    }  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    name = f"secrets-{uuid.uuid4().hex[:6]}"
    prefix = f"s3://{seaweedfs.bucket}/{name}"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(tiny(name=name, method="none", storage_uri=prefix)))

    run, run_s = _essaflow(["run", "run.yaml", "--no-progress"], env, tmp_path)
    gc, gc_s = _essaflow(["gc", "--storage-uri", prefix, "--dry-run"], env, tmp_path)
    for proc in (run, gc):
        assert proc.returncode == 1, proc.stderr[-3000:]
        line = _one_error_line(proc)
        assert f"S3 endpoint http://127.0.0.1:{dead} is unreachable: connection refused" in line, line
        assert json.loads(proc.stdout.strip().splitlines()[-1])["error"] in line
    assert "preflight" in _one_error_line(gc) and gc_s < 60  # refused: no retry waits it out (three took 85 s)
    # a deployment (the gc-storage schedule) runs the flow itself: the error is met in its task, logged to Prefect
    flow = subprocess.run(
        [sys.executable, "-c", "from essaflow.retention import RetentionConfig; from flows.gc import gc; "
         f"print(gc(RetentionConfig(storage_uri={prefix!r}), dry_run=True, return_state=True).type.value)"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert flow.stdout.strip().splitlines()[-1] == "FAILED" and "plan_gc" in flow.stderr, flow.stderr[-3000:]

    url = mlflow_server.url.replace("http://", f"http://sweep-user:{password}@")
    ok, _ = _essaflow(["gc", "--storage-uri", f"{prefix}-ok", "--tracking-uri", url, "--dry-run"],
                      {**env, "ESSAFLOW_S3_ENDPOINT_URL": seaweedfs.endpoint_url}, tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:]

    # the runs' logs reach Prefect's database in batches
    wait_until(lambda: b"connection refused" in b"".join(_files(prefect_server.state_dir).values()), 60,
               "the failed runs' logs to reach Prefect's database", every=1)  # fmt: skip
    stored = seaweedfs.store(name)
    texts: dict[str, str | bytes] = {
        **_files(prefect_server.state_dir, mlflow_server.state_dir, home, tmp_path),
        **{f"s3://{seaweedfs.bucket}/{name}/{k}": stored.get_bytes(k) for k in stored.list("")},
    }
    for label, proc in (("run", run), ("gc", gc), ("gc flow", flow), ("gc-ok", ok)):
        texts |= {f"{label} stdout": proc.stdout, f"{label} stderr": proc.stderr}
    assert any(label.endswith(".db") for label in texts)  # the databases were searched
    assert leaks([password], texts) == []
    print(f"failed run {run_s:.1f}s, failed gc {gc_s:.1f}s; {len(texts)} files and streams searched")
