"""A real two-node Ray cluster on one machine: `ray start --head` and `ray start --address` as separate processes.

Each node runs in its own process group with its own --temp-dir (Ray's per-node sockets live there, and `ray stop`
would stop every developer's Ray on the machine: this file never calls it). Token auth is on (RAY_AUTH_MODE=token,
a private token file) for both nodes and the driver. Every fixed default port of Ray (GCS 6379, client server 10001,
dashboard 8265, agent 52365) is replaced by a free one, so several clusters can run side by side.

Fixtures:
- ``ray_cluster`` (package: one cluster for every test module here): the processes; ``kill_raylet(node)``,
  ``kill_node(node)`` (every process of the node), ``add_node()``, ``wait_for_alive(n)``, ``log_files()``, start times.
- ``ray_driver`` (package): this process connected through ``essaflow.cluster.connect`` with a known set of worker
  settings (one of them a generated secret), waiting until both nodes are alive.
- ``two_nodes`` (function): the driver, with the second node restarted first if an earlier test killed it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devstack import LOCALHOST, Service, free_ports, start_process
from essaflow import cluster
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
# Node death is noticed after period x threshold of missed GCS health checks (Ray's default 3 s x 5).
HEALTH_CHECK_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5"}


@dataclass
class RayNode:
    name: str
    service: Service
    temp_dir: Path
    start_s: float


@dataclass
class LocalRayCluster:
    """Ray nodes started by this test session, each a `ray start --block` process group of its own."""

    root: Path
    cpus_per_node: int = 1
    nodes: list[RayNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_path = self.root / "ray_auth_token"
        fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        self.port = free_ports(1)[0]

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def auth_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        # Nodes get no AWS_*/service settings of the test session: whatever workers see came through runtime_env.
        drop = ("AWS_", "RAY_", "PREFECT_API", "MLFLOW_TRACKING", "ESSAFLOW_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(self.auth_env)
        env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)})  # workers import tests.*, like an image
        env.update(extra)
        return env

    def _start(self, name: str, args: list[str], extra_env: dict[str, str], wait_port: int | None = None) -> RayNode:
        """`ray start --block` with ``args``; ready when ``wait_port`` (default: its node-manager port) answers."""
        # Ray's unix sockets live under --temp-dir and their paths are limited to ~107 bytes: keep it short.
        temp_dir = Path(tempfile.mkdtemp(prefix="ef-ray-", dir="/tmp"))
        client, agent_http, agent_grpc, metrics, manager = free_ports(5)
        argv = [
            *(sys.executable, "-m", "ray.scripts.scripts", "start", "--block"),
            *args,
            f"--node-ip-address={LOCALHOST}",
            f"--num-cpus={self.cpus_per_node}",
            "--num-gpus=0",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            f"--node-manager-port={manager}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
        ]
        t0 = time.monotonic()
        port = wait_port or manager
        service = start_process(name, argv, self._env(extra_env), self.root, port, timeout=120, cwd=REPO)
        node = RayNode(name, service, temp_dir, time.monotonic() - t0)
        self.nodes.append(node)
        return node

    def start_head(self) -> RayNode:
        dashboard = free_ports(1)[0]
        head_args = ["--head", f"--port={self.port}", "--include-dashboard=false", f"--dashboard-port={dashboard}"]
        return self._start("ray-head", head_args, HEALTH_CHECK_ENV, wait_port=self.port)

    def add_node(self) -> RayNode:
        """Another node joining the head (it answers on its node-manager port before the GCS lists it)."""
        return self._start(f"ray-node-{len(self.nodes)}", [f"--address={self.address}"], {})

    def kill_raylet(self, node: RayNode) -> int:
        """SIGKILL the raylet of ``node`` (a node crash: its workers die with it). Returns the raylet's pid."""
        pid = _raylet_pid(node.service.pid)
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_node(self, node: RayNode) -> list[int]:
        """SIGKILL every process of ``node`` at once (a machine losing power): its raylet, agents and workers.

        Killing only the raylet is gentler than a crash: its workers keep computing until they notice, so a DDP
        job can finish its steps on an orphaned worker. Returns the pids killed.
        """
        # workers are the raylet's children but rename themselves (ray::CandidateScorer): follow the process tree
        group = _pids_in_group(node.service.pid)
        pids = sorted({*group, *_descendants(group), *_pids_mentioning(str(node.temp_dir))})
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def wait_for_alive(self, count: int, timeout: float = 90.0) -> float:
        """Seconds until the connected driver sees ``count`` alive nodes (AssertionError after ``timeout``)."""
        t0 = time.monotonic()
        wait_until(lambda: len(cluster.describe_cluster()) == count, timeout,
                   lambda: f"{count} alive nodes: {cluster.describe_cluster()}", every=0.2)  # fmt: skip
        return time.monotonic() - t0

    def log_files(self) -> list[Path]:
        """Every file Ray wrote for this cluster (session logs of all nodes) plus the nodes' own stdout logs."""
        files = [p for n in self.nodes for p in n.temp_dir.rglob("*") if p.is_file() and not p.is_socket()]
        return files + sorted(self.root.glob("*.log"))

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.service.stop(timeout=5)
        # Workers the raylets started may outlive their process groups: end those that name our temp dirs, by pid.
        for node in self.nodes:
            for pid in _pids_mentioning(str(node.temp_dir)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(node.temp_dir, ignore_errors=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids_in_group(group: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pgrp = int(stat.read_text().rsplit(")", 1)[1].split()[2])
        except (OSError, IndexError, ValueError):
            continue
        if pgrp == group:
            pids.append(int(stat.parent.name))
    return pids


def _descendants(roots: list[int]) -> set[int]:
    """Every process below ``roots`` in the process tree (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _raylet_pid(group: int) -> int:
    for pid in _pids_in_group(group):
        if "/raylet/raylet " in _cmdline(pid):
            return pid
    raise RuntimeError(f"no raylet in process group {group}")


def _pids_mentioning(text: str) -> list[int]:
    me = os.getpid()
    return [int(p.name) for p in Path("/proc").glob("[0-9]*") if int(p.name) != me and text in _cmdline(int(p.name))]


# ------------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="package")
def ray_cluster(tmp_path_factory) -> Iterator[LocalRayCluster]:
    c = LocalRayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        c.start_head()
        c.add_node()
        yield c
    finally:
        c.stop()


@dataclass
class Driver:
    """This process, connected to ``cluster``; ``worker_env`` is what workers were told (``secret`` among it)."""

    cluster: LocalRayCluster
    connection: cluster.ClusterConnection
    worker_env: dict[str, str]
    secret: str
    join_s: float
    log_lines: list[str]


@pytest.fixture(scope="package")
def ray_driver(ray_cluster: LocalRayCluster) -> Iterator[Driver]:
    import logging

    secret = "s3cr3t-" + secrets.token_urlsafe(24)
    worker_env = {
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "ESSAFLOW_STORAGE_URI": "s3://essaflow-test/multinode",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "essaflow" + secrets.token_hex(4),
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    saved_auth = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler, log = Collect(level=logging.DEBUG), logging.getLogger("essaflow.cluster")
    old_level = log.level
    try:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        with pytest.MonkeyPatch.context() as mp:  # the workers' settings exist in the driver only while it connects
            for k, v in worker_env.items():
                mp.setenv(k, v)
            t0 = time.monotonic()
            conn = cluster.connect(ray_cluster.address, auth_token_path=ray_cluster.token_path)
            ray_cluster.wait_for_alive(2)
            join_s = time.monotonic() - t0
        log.removeHandler(handler)
        log.setLevel(old_level)
        yield Driver(ray_cluster, conn, worker_env, secret, join_s, lines)
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
        cluster.shutdown()
        # Later tests in this process may start a local Ray: give them back Ray's auth settings as they were.
        for k, v in saved_auth.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        cluster.reload_ray_auth()


@pytest.fixture
def two_nodes(ray_driver: Driver) -> Driver:
    """The connected driver with two alive nodes (a node killed by an earlier test is started again)."""
    if len(cluster.describe_cluster()) < 2:
        ray_driver.cluster.add_node()
        ray_driver.cluster.wait_for_alive(2)
    return ray_driver
