"""Prefect's temporary server as the CLI starts it, at once and in the background (cli/prefect_server.py): a flow
run against it keeps what it keeps on the server Prefect starts itself (task runs and their states, the run's logs,
artifacts), and the server stops when asked; with PREFECT_API_URL set nothing starts.

The flow runs in a fresh process, as under the CLI: Prefect keeps one events worker per process whatever server it
was made for, so a process that has talked to another server would send the run's events there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.prefect_server import start_temporary_server

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def run_a_small_flow_on_the_early_server() -> dict:
    """In the child process: start the server, run a flow of two tasks on it, read back what the server kept."""
    from prefect import flow, get_run_logger, task
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    from cli.prefect_server import prefect_api
    from tests.support.waiting import wait_until

    @task(retries=1, retry_delay_seconds=0)
    def add(a: int, b: int) -> int:
        get_run_logger().info("adding %d and %d", a, b)
        create_markdown_artifact(f"{a} + {b}", key="sum-note")
        return a + b

    @flow(name="temporary-server-check")
    def sums() -> int:
        return add(1, 2) + add(3, 4)

    server = start_temporary_server()
    with prefect_api(server) as waited:
        state = sums(return_state=True)
        run_id = state.state_details.flow_run_id
        with get_client(sync_client=True) as client:  # task runs arrive as events, logs in batches: polled
            runs = FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
            states = lambda: sorted(r.state_name for r in client.read_task_runs(flow_run_filter=runs))  # noqa: E731
            wait_until(lambda: states() == ["Completed", "Completed"], 60, "both task runs recorded Completed")
            logs = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
            lines = lambda: [log.message for log in client.read_logs(logs)]  # noqa: E731
            wait_until(lambda: any("adding 3 and 4" in line for line in lines()), 60, "the task's log line")
            seen = {
                "api_port": client.api_url.port, "completed": state.is_completed(), "result": state.result(),
                "task_runs": states(), "artifacts": sorted({a.key for a in client.read_artifacts()}),
            }  # fmt: skip
    server.stop()
    return {**seen, "server_port": server.port, "waited": waited, "stopped": server.process is None}


def test_a_flow_run_on_the_early_server_keeps_its_task_runs_logs_and_artifacts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({
        "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",  # the CLI's allowance for busy cores
    })  # fmt: skip
    code = (
        "import json; from tests.integration.test_prefect_temporary_server import run_a_small_flow_on_the_early_server"
        " as run; print(json.dumps(run()))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])

    assert seen["completed"] and seen["result"] == 10 and seen["api_port"] == seen["server_port"]
    assert seen["task_runs"] == ["Completed", "Completed"] and "sum-note" in seen["artifacts"]
    assert seen["waited"] >= 0 and seen["stopped"]


def test_nothing_starts_when_prefect_api_url_names_a_server(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert start_temporary_server() is None
