"""The UI path a person takes, in a real browser: a Prefect server, `essaflow deploy`, headless Chromium opens the
finetune-essa deployment, starts a Custom run with one field changed in the form, a `--run-once` process worker
executes it, and the run completes with that value (and the preset's values for every field left alone).

Needs Debian's chromium and the pinned playwright-core driver (`make test` installs them first, through `make
browser`); without them the test fails, naming what is missing. Screenshots: the form and the created run on
every pass; on a failure, the page as it was, their paths printed. They go to ESSAFLOW_TEST_ARTIFACTS (default
.essaflow/test-artifacts/browser/).

The deployment's preset is configs/tiny-essa.yaml at test size (ESSAFLOW_PRESETS_DIR): a few SFT steps, 2 ESSA
generations of 4 candidates, 16 held-out problems; the form changes essa.generations from 2 to 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from flows.parameters import merge_tree, preset_tree
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]  # the browser waits up to 3 min for a new run
REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "e2e" / "browser"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
POOL = "essaflow-process"
#: configs/tiny-essa.yaml with test budgets; every other key stays the preset's
TEST_SIZE = {
    "name": "browser-test",
    "data": {"synthetic": {"num_problems": 400}, "eval_size": 16},
    "eval": {"samples_per_problem": 4, "ks": [1, 2, 4]},
    "sampling": {"batch_size": 256},
    "sft": {"steps": 10, "batch_size": 16},
    "essa": {"population": 4, "generations": 2, "minibatch": 8, "checkpoint_every": 1, "eval_every": 0},
}
TEST_SIZE["essa"]["workers"] = {"count": 1}


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, DRIVER / "node_modules" / "playwright-core") if not p.exists()]
    missing += [] if shutil.which("node") else ["node"]
    if missing:
        why = f"browser test needs {', '.join(missing)}: run `make browser`"
        pytest.fail(why)


def _browser(mode: str, opts: dict, timeout: float = 480) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHROMIUM": str(CHROMIUM)}
    return subprocess.run(
        ["node", str(DRIVER / "custom_run.js"), mode, json.dumps(opts)],
        cwd=DRIVER, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _api(server, path: str) -> dict:
    with urllib.request.urlopen(f"{server.url}/api/{path}", timeout=10) as r:
        return json.loads(r.read())


def _final_state(server, flow_run_id: str, wait_s: float = 30) -> str:
    """The flow run's final state name (the server records states from events: wait for a final one)."""

    def final() -> str | None:
        state = _api(server, f"flow_runs/{flow_run_id}")["state"] or {}
        return state.get("name") if state.get("type") in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"} else None

    return wait_until(final, wait_s, f"a final state of flow run {flow_run_id}", every=0.5)


@pytest.fixture
def artifacts() -> Path:
    root = Path(os.environ.get("ESSAFLOW_TEST_ARTIFACTS") or REPO / ".essaflow" / "test-artifacts")
    out = root / "browser" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def deployed(prefect_server, tmp_path):
    """`essaflow deploy` against the server, presets at test size; the environment a worker then runs with."""
    _require_browser()
    presets = tmp_path / "presets"
    presets.mkdir()
    for name in ("tiny-essa", "tiny-fgrpo", "tiny", "compare-tiny"):  # every flow's preset must load
        tree = merge_tree(preset_tree(name), TEST_SIZE) if name == "tiny-essa" else preset_tree(name)
        (presets / f"{name}.yaml").write_text(yaml.safe_dump(tree))
    drop = ("PREFECT_", "MLFLOW_", "AWS_", "RAY_", "ESSAFLOW_S")  # nothing of the caller's services
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        {
            "PREFECT_API_URL": f"{prefect_server.url}/api",
            "PREFECT_HOME": str(tmp_path / "client-home"),
            "ESSAFLOW_PRESETS_DIR": str(presets),
            "ESSAFLOW_STORAGE_URI": (tmp_path / "store").as_uri(),
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
    )
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "deploy", "--pool", POOL],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"essaflow deploy: {time.monotonic() - t0:.1f}s")
    return env, tmp_path


def test_a_custom_run_started_from_the_form_completes_with_the_changed_field(prefect_server, deployed, artifacts):
    env, tmp = deployed
    t0 = time.monotonic()
    opts = {"ui": prefect_server.url, "deployment": "finetune-essa", "label": "generations", "value": 3}
    opts["sections"] = ["data", "model", "essa", "grpo", "DataConfig", "ESSAConfig", "GRPOConfig"]
    ui = _browser("run", {**opts, "artifacts": str(artifacts)})
    assert ui.returncode == 0, f"browser: {ui.stderr[-3000:]}"
    created = json.loads(ui.stdout.strip().splitlines()[-1])
    flow_run_id = created["flow_run_id"]
    print(f"browser: run {flow_run_id} created in {time.monotonic() - t0:.1f}s; screenshots: {created['screenshots']}")
    try:
        assert created["before"] == "2"  # the form showed the deployment's preset, not the library's 60
        # sections titled by key (data twice: the training source and eval.data, the held-out one), the ESSA
        # deployment's form without F-GRPO's section
        shown = created["sections"]
        titled = {"data": 2, "model": 1, "essa": 1}
        assert shown == {**titled, **dict.fromkeys(opts["sections"][3:], 0)}
        log = tmp / "worker.log"
        with open(log, "w") as f:
            worker = subprocess.run(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type", "process", "--run-once"],
                cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=480,
            )  # fmt: skip
        assert worker.returncode == 0, log.read_text()[-3000:]
        assert _final_state(prefect_server, flow_run_id) == "Completed", log.read_text()[-3000:]
        config = _api(prefect_server, f"flow_runs/{flow_run_id}")["parameters"]["config"]
        assert config["essa"]["generations"] == 3  # the changed field
        assert config["essa"]["strategy"] == "es" and config["name"] == "browser-test"  # the rest: the preset's
        assert "grpo" not in config
        checkpoints = sorted(p.name for p in (tmp / "store" / "runs" / flow_run_id / "checkpoints").iterdir())
        assert len(checkpoints) == 3, checkpoints  # checkpoint_every 1: the run did train 3 generations
    except BaseException:
        shot = artifacts / "flow-run-at-failure.png"
        taken = _browser("shot", {"url": created["url"], "path": str(shot)}, timeout=120)
        print(f"screenshots: {[*created['screenshots'], str(shot) if taken.returncode == 0 else taken.stderr]}")
        raise
    print(f"browser UI run, created to completed: {time.monotonic() - t0:.1f}s")
