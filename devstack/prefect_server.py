"""A Prefect server (sqlite, UI pointed at its own API) and a process worker, both on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from devstack.ports import LOCALHOST, free_port
from devstack.process import Service, base_env, http_ready, python_module, start_process


def prefect_server_env(state_dir: Path, port: int) -> dict[str, str]:
    """Settings that keep a Prefect server's home, database and UI pointed at itself on 127.0.0.1:port.

    The UI reads its API address from PREFECT_UI_API_URL; unless that (or PREFECT_SERVER_API_PORT) matches the
    port, a server on a port other than 4200 serves a UI that talks to :4200 and fails quietly.
    """
    api = f"http://{LOCALHOST}:{port}/api"
    return {
        "PREFECT_HOME": str(Path(state_dir) / "prefect"),
        "PREFECT_SERVER_API_HOST": LOCALHOST,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_UI_API_URL": api,
        "PREFECT_UI_URL": f"http://{LOCALHOST}:{port}",
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def start_prefect_server(
    state_dir: Path, port: int, *, scheduler: bool = True, extra_env: dict[str, str] | None = None, timeout=180.0
) -> Service:
    """`prefect server start` on 127.0.0.1:port, sqlite database and UI build under ``state_dir/prefect``."""
    state_dir = Path(state_dir).absolute()
    env = base_env(state_dir, prefect_server_env(state_dir, port))
    if not scheduler:  # tests trigger runs themselves; a cron firing mid-test would only add noise
        env["PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED"] = "false"
    env.update(extra_env or {})
    argv = [*python_module("prefect"), "server", "start", "--host", LOCALHOST, "--port", str(port)]
    url = f"http://{LOCALHOST}:{port}"
    return start_process(
        "prefect-server", argv, env, state_dir, port, url=url, ready=http_ready(url + "/api/health"), timeout=timeout
    )


def start_prefect_worker(
    state_dir: Path,
    api_url: str,
    pool: str,
    *,
    extra_env: dict[str, str] | None = None,
    run_once: bool = False,
    cwd: Path | None = None,
    timeout: float = 120.0,
) -> Service:
    """A process worker polling ``pool`` (created if missing); its health endpoint on a free 127.0.0.1 port.

    The worker ignores a single SIGTERM while a flow runs; :meth:`Service.stop` escalates to SIGKILL.
    """
    state_dir = Path(state_dir).absolute()
    port = free_port()
    env = base_env(state_dir, {"PREFECT_API_URL": api_url, "PREFECT_HOME": str(state_dir / "prefect-worker")})
    env.update({"PREFECT_WORKER_WEBSERVER_HOST": LOCALHOST, "PREFECT_WORKER_WEBSERVER_PORT": str(port)})
    env.update(extra_env or {})
    argv = [*python_module("prefect"), "worker", "start", "--pool", pool, "--type", "process", "--with-healthcheck"]
    if run_once:
        argv.append("--run-once")
    return start_process("prefect-worker", argv, env, state_dir, port, timeout=timeout, cwd=cwd)
