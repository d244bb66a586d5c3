"""`essaflow run` finds an artifact store that does not answer and a hub id that resolves nowhere in its preflight:
one line naming the service and the fix, the JSON line last, before Prefect starts or any data is prepared. The
S3 endpoint carries a planted password, which no output shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from devstack import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SERVER_VARS = ("PREFECT_", "MLFLOW_", "AWS_", "RAY_", "ESSAFLOW_S", "ESSAFLOW_STACK_DIR")


def _run(sets: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    args = [a for s in sets for a in ("--set", s)]
    t0 = time.monotonic()
    command = [sys.executable, "-m", "cli.main", "run", str(REPO / "configs" / "tiny.yaml"), *args, "--no-progress"]
    env = {**base, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(cwd / "prefect"), **env}
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    return proc, time.monotonic() - t0


def _preflight_failure(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stage"] == "preflight" and result["error"] in errors[0] and result["resume"] is None
    assert "prepare_dataset" not in proc.stderr and "open_run" not in proc.stderr  # no flow ran
    return errors[0]


def test_an_s3_store_that_does_not_answer_is_found_before_the_flow(tmp_path):
    password = "planted-" + uuid.uuid4().hex
    endpoint = f"http://user:{password}@127.0.0.1:{free_port()}"
    proc, took = _run(["storage_uri=s3://bucket/runs"], tmp_path, ESSAFLOW_S3_ENDPOINT_URL=endpoint,
                      AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s")  # fmt: skip
    line = _preflight_failure(proc)
    assert "StorageError: S3 endpoint http://127.0.0.1:" in line and "is unreachable: connection refused" in line
    assert password not in proc.stdout + proc.stderr
    assert not (tmp_path / "prefect").exists(), "Prefect was never started"
    print(f"S3 down named in {took:.1f}s")


def test_a_hub_id_that_resolves_nowhere_is_found_before_the_flow(tmp_path):
    proc, took = _run(["model.name_or_path=nonexistent-org/nonexistent-model"], tmp_path, HF_HUB_OFFLINE="1",
                      HF_HOME=str(tmp_path / "hf"))  # fmt: skip
    line = _preflight_failure(proc)
    assert "model.name_or_path 'nonexistent-org/nonexistent-model' is not a local path" in line
    assert "check the id's spelling" in line and "huggingface-cli download" in line
    print(f"unresolvable hub id named in {took:.1f}s")


def test_gc_with_an_s3_store_that_does_not_answer_says_so_before_the_flow(tmp_path):
    password = "planted-" + uuid.uuid4().hex
    base = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    env = {**base, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect"),
           "ESSAFLOW_S3_ENDPOINT_URL": f"http://user:{password}@127.0.0.1:{free_port()}",
           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}  # fmt: skip
    t0 = time.monotonic()
    command = [sys.executable, "-m", "cli.main", "gc", "--dry-run", "--storage-uri", "s3://bucket/runs"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stage"] == "preflight" and "is unreachable: connection refused" in result["error"]
    assert password not in proc.stdout + proc.stderr
    assert not (tmp_path / "prefect").exists(), "Prefect was never started"
    print(f"gc: S3 down named in {took:.1f}s")


def test_an_essa_job_with_no_ray_head_at_its_address_says_so_before_importing_the_model_stack(tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    env = {**base, "PYTHONPATH": str(REPO), "RAY_ADDRESS": f"127.0.0.1:{free_port()}"}
    t0 = time.monotonic()
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "cli.main",
        "essa",
        "-c",
        str(REPO / "configs" / "tiny-essa.yaml"),
    ]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stage"] == "preflight" and "ClusterUnreachable: Ray cluster at 127.0.0.1:" in result["error"]
    assert "ray start --head" in result["error"]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "essaflow.stages.job" not in imported  # refused before the model stack
    print(f"essa job: Ray head missing named in {took:.1f}s")


def test_a_data_path_that_is_a_symlink_loop_is_refused_before_the_flow(tmp_path):
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    proc, took = _run(["data.source=file", f"data.path={tmp_path / 'a.jsonl'}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: data.path: {tmp_path / 'a.jsonl'}: data.path is a symlink loop" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["stage"] == "config"
    assert not (tmp_path / "prefect").exists(), "Prefect was never started"
    print(f"data symlink loop named in {took:.1f}s")
