"""One local server as a process: started in its own process group, recorded, checked and stopped by PID.

A server is started by :func:`start_process`: it runs in its own process group, logs to ``state_dir/<name>.log``,
records ``state_dir/<name>.service.json`` (pid, url, log) and is ready once its port answers (and an optional
readiness check passes). :meth:`Service.stop` terminates the process group by PID and waits. The server-specific
starters (devstack.seaweedfs, devstack.mlflow_server, devstack.prefect_server, devstack.ray_head) only build argv,
env and a readiness check, with the helpers at the end of this module.

This module never imports prefect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from devstack.ports import LOCALHOST, port_open


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


def stop_interrupting(service: Service, timeout: float = 15.0) -> None:
    """Stop a server that shuts down cleanly on SIGINT but not on SIGTERM: a `ray start --block` head (SIGTERM
    leaves it waiting) and a Prefect worker (it ignores a single SIGTERM). Both exit in about 0.5-2 s on SIGINT;
    whatever is left after ``timeout`` gets SIGTERM, then SIGKILL, via :meth:`Service.stop`."""
    if service.is_running():
        _signal_group(service.pid, signal.SIGINT)
        service._wait(timeout)
    service.stop(timeout=5.0)


# ------------------------------------------------------------------------------- helpers of the server starters


def http_ready(url: str) -> Callable[[], bool]:
    """A readiness check: ``url`` answers with a status below 500."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500  # 403 to an anonymous request means the S3 gateway is serving
        except OSError:
            return False

    return ready


def python_module(module: str) -> list[str]:
    """argv prefix running ``module`` with this Python: the recorded argv0 is then the interpreter itself, which is
    what /proc shows, so a Service loaded back from its state file still recognises its process."""
    return [sys.executable, "-m", module]


def base_env(state_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
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
