"""`essaflow stack up|status|env|down` and `essaflow deploy`: every server on 127.0.0.1 with PID and log under one
state directory, the Prefect UI pointed at its own API (not :4200), and a clean stop by PID.

The module's stack is its own: a fresh state directory (its ports and credentials chosen there), and commands run
with none of the variables that point a process at servers (what other tests or the user's shell set) and a
Prefect home of its own, so the tests pass alone, in any order, and beside other tests' servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from devstack.process import load_service

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


#: variables that point a process at servers: none reaches these commands but the stack's own
SERVER_VARS = ("PREFECT_", "MLFLOW_", "AWS_", "RAY_", "ESSAFLOW_S", "ESSAFLOW_STACK_DIR")


def clean_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_VARS)}
    return {**env, "PREFECT_HOME": str(state / "cli-prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def essaflow(*args: str, state: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env=env or clean_env(state),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """The module's state directory; whatever still runs there at the end is stopped."""
    state = tmp_path_factory.mktemp("stack")
    try:
        yield state
    finally:
        essaflow("stack", "down", "--state-dir", str(state), state=state, check=False)


@pytest.fixture
def stack(state_dir):
    """A running stack, whatever ran before: `stack up` starts only what is not running (everything the first time,
    nothing after another test, everything again after test_stack_down), so any test passes alone or in any order."""
    up = essaflow("stack", "up", "--state-dir", str(state_dir), state=state_dir)
    return state_dir, json.loads(up.stdout.strip().splitlines()[-1])["services"]


def test_stack_up_starts_every_server_on_localhost_with_pid_and_log_in_one_state_dir(stack):
    state, services = stack
    assert set(services) == {"seaweedfs", "mlflow-server", "prefect-server", "ray-head", "prefect-worker"}
    for name, info in services.items():
        assert "127.0.0.1" in info["url"], name
        assert (state / f"{name}.service.json").exists() and (state / f"{name}.log").exists()
        print(f"{name}: start {info['start_s']}s, {info['rss_mb']} MB")
    assert oct((state / "credentials.json").stat().st_mode)[-3:] == "600"
    assert oct((state / "stack.env").stat().st_mode)[-3:] == "600"
    status = json.loads(
        essaflow("stack", "status", "--state-dir", str(state), state=state).stdout.strip().splitlines()[-1]
    )
    assert all(s["healthy"] for s in status["services"].values()), status


def test_the_prefect_ui_served_by_the_stack_talks_to_its_own_api(stack):
    _, services = stack
    url = services["prefect-server"]["url"]
    assert not url.endswith(":4200")
    with urllib.request.urlopen(f"{url}/ui-settings", timeout=10) as r:
        assert json.loads(r.read())["api_url"] == f"{url}/api"


def test_deploy_from_the_stack_environment(stack):
    state, _ = stack
    exports = essaflow("stack", "env", "--state-dir", str(state), state=state).stdout
    env = clean_env(state)
    for line in exports.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value.strip("'")
    out = essaflow("deploy", state=state, env=env)
    assert json.loads(out.stdout.strip().splitlines()[-1])["deployed"] == "all"
    secret = json.loads((state / "credentials.json").read_text())["secret_key"]
    assert secret not in out.stdout + out.stderr


def test_stack_down_stops_every_server_by_pid(stack):
    state, services = stack
    started = {name: load_service(state, name) for name in services}  # pid and program, from the state dir
    assert None not in started.values(), started
    down = json.loads(essaflow("stack", "down", "--state-dir", str(state), state=state).stdout.strip().splitlines()[-1])
    assert set(down["services"].values()) == {"stopped"}
    assert not [name for name, service in started.items() if service.is_running()]
    assert essaflow("stack", "status", "--state-dir", str(state), state=state, check=False).returncode == 1
