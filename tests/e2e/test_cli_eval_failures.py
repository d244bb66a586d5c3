"""`essaflow eval` takes `models:/NAME@ALIAS` as its help says, and fails in one line with its JSON line last: a
model the registry lacks before Prefect starts, a dataset is prepared or an MLflow run opened; Prefect's API
unreachable as the orchestration stage naming the address, not a 400-line traceback.

The registry is MLflow's sqlite file in the command's directory (a model version registered by the test, no
training); nothing but the commands' own processes runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
#: variables that point a process at servers: none reaches these commands
SERVER_VARS = ("PREFECT_", "MLFLOW_", "AWS_", "RAY_", "ESSAFLOW_S", "ESSAFLOW_STACK_DIR")


def _eval(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli.main", "eval", *args], cwd=cwd, capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(cwd / "prefect-home"), **env},
                          timeout=600)  # fmt: skip
    return proc, time.monotonic() - t0


def _failure(proc: subprocess.CompletedProcess) -> tuple[str, dict]:
    """The one `error:` line on stderr and the JSON line last on stdout."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0], json.loads(proc.stdout.strip().splitlines()[-1])


def _registry(cwd: Path) -> str:
    """The sqlite registry `essaflow eval` reads in `cwd` (no MLFLOW_TRACKING_URI), with models:/known@champion."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{cwd / '.essaflow' / 'mlflow.db'}"
    (cwd / ".essaflow").mkdir()
    c = MlflowClient(uri, uri)
    c.create_registered_model("known")
    version = c.create_model_version("known", source=str(cwd))
    c.set_registered_model_alias("known", "champion", version.version)
    return uri


def test_a_model_the_registry_lacks_fails_before_anything_is_evaluated_naming_what_it_holds(tmp_path):
    uri = _registry(tmp_path)
    proc, took = _eval(["models:/missing@champion"], tmp_path)
    assert proc.returncode == 1
    line, result = _failure(proc)
    assert "no registered model 'missing'" in line and "registered: known" in line, line
    assert result["stage"] == "preflight" and result["error"] in line and result["resume"] is None
    proc, _ = _eval(["models:/known@challenger"], tmp_path)
    line, _ = _failure(proc)
    assert "model 'known'" in line and "has no alias 'challenger' (its aliases: champion)" in line, line
    from mlflow import MlflowClient

    assert MlflowClient(uri).get_experiment_by_name("missing") is None  # no MLflow run was opened
    elsewhere = tmp_path / "elsewhere"  # a directory without the runs' registry: said, with where to look
    elsewhere.mkdir()
    line, _ = _failure(_eval(["models:/known@champion"], elsewhere)[0])
    assert line.endswith("(registered: none: is this the registry your runs wrote to? run from their directory, "
                         "or set MLFLOW_TRACKING_URI / tracking_uri to it)"), line  # fmt: skip
    assert "prepare_dataset" not in proc.stderr and not (tmp_path / ".essaflow" / "store").exists()
    print(f"missing model named in {took:.1f}s")


def test_prefect_unreachable_is_one_line_naming_its_api_and_the_json_line(tmp_path):
    _registry(tmp_path)
    api = f"http://127.0.0.1:{free_port()}/api"
    proc, took = _eval(["models:/known@champion"], tmp_path, PREFECT_API_URL=api)
    assert proc.returncode == 1
    line, result = _failure(proc)
    assert line.startswith(f"error: orchestration: Prefect API at {api}: ") and api in result["error"], line
    assert line.endswith("start it (essaflow stack up), or unset PREFECT_API_URL to run on a temporary local server")
    assert len(proc.stderr.splitlines()) < 10, proc.stderr[-3000:]
    print(f"Prefect unreachable named in {took:.1f}s: {line}")


def test_a_target_that_is_no_model_uri_is_a_usage_error(tmp_path):
    proc, _ = _eval(["models:known"], tmp_path)
    assert proc.returncode == 2
    line, result = _failure(proc)
    assert "'models:known' is not models:/NAME@ALIAS" in line and result["stage"] == "config"
