"""Prefect's temporary server as the CLI starts it, at once and in the background (cli/prefect_server.py): a flow
run against it keeps what it keeps on the server Prefect starts itself (task runs and their states, the run's logs,
artifacts), and the server stops when asked; with PREFECT_API_URL set nothing starts."""

from __future__ import annotations

import pytest

from cli.prefect_server import prefect_api, start_temporary_server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    """The server's own sqlite database in a fresh PREFECT_HOME, no server named in the environment, and the CLI's
    start-up allowance (cli/common.py) for a server on busy cores."""
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    with temporary_settings(updates={PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 180}):
        yield


def _a_small_flow():
    from prefect import flow, get_run_logger, task
    from prefect.artifacts import create_markdown_artifact

    @task(retries=1, retry_delay_seconds=0)
    def add(a: int, b: int) -> int:
        get_run_logger().info("adding %d and %d", a, b)
        create_markdown_artifact(f"{a} + {b}", key="sum-note")
        return a + b

    @flow(name="temporary-server-check")
    def sums() -> int:
        return add(1, 2) + add(3, 4)

    return sums


def test_a_flow_run_on_the_early_server_keeps_its_task_runs_logs_and_artifacts(fresh_home):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

    server = start_temporary_server()
    assert server is not None
    try:
        with prefect_api(server) as waited:
            assert waited >= 0 and server.ready()
            state = _a_small_flow()(return_state=True)
            assert state.is_completed() and state.result() == 10
            run_id = state.state_details.flow_run_id
            with get_client(sync_client=True) as client:  # task runs arrive as events, logs in batches: polled
                assert client.api_url.host == "127.0.0.1" and client.api_url.port == server.port
                runs = FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
                states = lambda: sorted(r.state_name for r in client.read_task_runs(flow_run_filter=runs))  # noqa: E731
                wait_until(lambda: states() == ["Completed", "Completed"], 30, "both task runs recorded Completed")
                logs = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
                lines = lambda: [log.message for log in client.read_logs(logs)]  # noqa: E731
                wait_until(lambda: any("adding 3 and 4" in line for line in lines()), 30, "the task's log line")
                assert {a.key for a in client.read_artifacts()} >= {"sum-note"}
    finally:
        server.stop()
    assert server.process is None and not server.ready()


def test_nothing_starts_when_prefect_api_url_names_a_server(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert start_temporary_server() is None
