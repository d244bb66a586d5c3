"""No password of the tracking URI reaches the terminal: `essaflow run` with the URI given by `--set`, `essaflow eval`
with it in MLFLOW_TRACKING_URI, and a run that fails after its MLflow run opened (URI by `--set`), against the real
MLflow server, which takes the basic-auth header and ignores it. MLflow ends each run with "🏃 View run ... at: <the
tracking URI>" on stdout: each command's stdout and stderr are searched for the password, and the link is still
printed, the user kept and the password masked (essaflow/secrets.py: MaskedStream)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration.pipeline_support import REPO, leaks

pytestmark = pytest.mark.integration
SERVER_VARS = ("PREFECT_", "MLFLOW_", "AWS_", "RAY_", "ESSAFLOW_S")
#: the e2e test's tiny run: SFT only, a few steps, 16 held-out problems
TINY = {
    "method": "none",
    "data": {"synthetic": {"num_problems": 300}, "eval_size": 16},
    "eval": {"samples_per_problem": 4, "ks": [1, 2, 4]},
    "sampling": {"max_new_tokens": 6, "batch_size": 256},
    "sft": {"steps": 10, "batch_size": 16},
}


def _essaflow(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    return proc, time.monotonic() - t0


def _view_run_lines(proc: subprocess.CompletedProcess, user: str) -> list[str]:
    """MLflow's "View run" / "View experiment" lines on stdout, each naming the server with the password masked."""
    lines = [line for line in proc.stdout.splitlines() if "View run" in line or "View experiment" in line]
    assert lines and all(f"http://{user}:***@127.0.0.1:" in line for line in lines), proc.stdout[-3000:]
    return lines


def test_no_tracking_password_on_the_terminal_of_a_run_an_eval_and_a_failed_run(prefect_server, mlflow_server,
                                                                                 tmp_path):  # fmt: skip
    password = "planted-" + uuid.uuid4().hex
    user = "term-user"
    url = mlflow_server.url.replace("http://", f"http://{user}:{password}@")
    env = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    env |= {"PYTHONPATH": str(REPO), "PREFECT_API_URL": f"{prefect_server.url}/api",
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
            "ESSAFLOW_CACHE_DIR": os.environ["ESSAFLOW_CACHE_DIR"]}  # fmt: skip
    name = f"terminal-{uuid.uuid4().hex[:6]}"
    store = (tmp_path / "store").as_uri()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**TINY, "name": name, "storage_uri": store}))
    # a reward that scores the reference answers (the preflight tries those) and raises on the model's text: the run
    # fails in its first evaluation, after MLflow's run opened
    (tmp_path / "picky.py").write_text("def score(completion, problem):\n    if completion.strip() != problem.answer:\n"
                                       "        raise ValueError('picky')\n    return 1.0\n")  # fmt: skip
    bad = {**TINY, "name": f"{name}-bad", "storage_uri": store, "eval": {**TINY["eval"], "reward": "picky.py:score"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))

    run, run_s = _essaflow(["run", "run.yaml", "--set", f"tracking_uri={url}"], env, tmp_path)  # progress bars on
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1])["aliases"] == ["champion"]
    ev, ev_s = _essaflow(["eval", f"models:/{name}@champion"], {**env, "MLFLOW_TRACKING_URI": url}, tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    failed, failed_s = _essaflow(["run", "bad.yaml", "--no-progress", "--set", f"tracking_uri={url}"], env, tmp_path)
    assert failed.returncode == 1, failed.stderr[-3000:]
    outcome = json.loads(failed.stdout.splitlines()[-1])
    assert outcome["stage"] not in ("config", "preflight") and outcome["run_id"], outcome  # failed inside the flow

    for label, proc in (("run", run), ("eval", ev), ("failed run", failed)):
        print(label, *_view_run_lines(proc, user), sep="\n  ")  # MLflow's link is still there, masked
    texts = {f"{label} {stream}": getattr(proc, stream) for label, proc in (("run", run), ("eval", ev),
             ("failed run", failed)) for stream in ("stdout", "stderr")}  # fmt: skip
    assert leaks([password], texts) == []
    print(f"run {run_s:.1f}s, eval {ev_s:.1f}s, failed run {failed_s:.1f}s")
