"""A Ray head node (`ray start --head --block`) with token auth, its token file in the state dir."""

from __future__ import annotations

import os
from pathlib import Path

from devstack.ports import LOCALHOST, free_ports
from devstack.process import Service, ServiceError, base_env, python_module, start_process

START_ATTEMPTS = 3


def ray_env(token_path: Path) -> dict[str, str]:
    """Token auth on, with the token in a file: the head and every client must agree (Ray >= 2.60)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def start_ray_head(state_dir: Path, port: int, *, num_cpus: int = 2, timeout: float = 120.0) -> Service:
    """`ray start --head --block` on port ``port`` with token auth (token file in ``state_dir``, mode 0600).

    Ray binds its other ports on every interface whatever --node-ip-address says; the token is what guards them.
    Those side ports (client server, dashboard agent, metrics, node manager) are free ones, not Ray's fixed
    defaults, so a second head on the machine (another stack, a parallel test worker) starts beside this one.
    Its session files go to a short directory (Ray's unix sockets limit path length), recorded in ray.tmpdir.
    """
    import secrets
    import tempfile

    state_dir = Path(state_dir).absolute()
    state_dir.mkdir(parents=True, exist_ok=True)
    token_path = state_dir / "ray_auth_token"
    if not token_path.exists():
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    temp_dir = state_dir / "ray"
    if len(str(temp_dir)) > 40:
        temp_dir = Path(tempfile.mkdtemp(prefix="essaflow-ray-", dir="/tmp"))
    temp_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "ray.tmpdir").write_text(str(temp_dir))
    env = base_env(state_dir, {**ray_env(token_path), "RAY_USAGE_STATS_ENABLED": "0"})
    client, agent_http, agent_grpc, metrics, manager, dashboard = free_ports(6)
    argv = [
        *python_module("ray.scripts.scripts"),
        "start",
        "--head",
        "--block",
        f"--port={port}",
        f"--node-ip-address={LOCALHOST}",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=false",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--metrics-export-port={metrics}",
        f"--node-manager-port={manager}",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    log_path = state_dir / "ray-head.log"
    for attempt in range(START_ATTEMPTS):
        since = log_path.stat().st_size if log_path.exists() else 0
        try:
            started = _runtime_started(log_path, since)
            return start_process(
                "ray-head", argv, env, state_dir, port, url=f"{LOCALHOST}:{port}", ready=started, timeout=timeout
            )
        except ServiceError as e:
            # Ray gives its raylet a fixed 30 s to register; on a loaded machine it can miss that once
            if "timed out during startup" not in str(e) or attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _runtime_started(log_path: Path, since: int):
    """Ready once `ray start` logged that the node is up (the GCS port answers before the raylet registered, and
    the head still exits if the raylet misses Ray's startup deadline)."""

    def ready() -> bool:
        with open(log_path, "rb") as f:
            f.seek(since)
            return b"Ray runtime started" in f.read()

    return ready
