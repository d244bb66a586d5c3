"""Prefect's temporary local server, started as a command begins instead of on its flow's first API call.

Without PREFECT_API_URL, Prefect starts a temporary server when a flow first calls its API, and the flow waits for
it: a Python process that imports Prefect's server and migrates its database (10 s of CPU with a new Prefect home, 4 s
after; 10-25 s of wall time on 2 busy cores). Started here first, that start-up runs on the other core while the
command does what it would do anyway before and at the start of its flow (importing Prefect and the flow, opening
the local MLflow store, importing the model stack: essaflow/stages/preload.py). It is the server Prefect would start,
started the way Prefect starts it (uvicorn with Prefect's app factory in ephemeral mode: no UI, only the services a
temporary server runs), on a free local port, and it stops when the process exits, after Prefect has sent its last
logs and events. Nothing starts when PREFECT_API_URL is set; a Prefect profile that names a server, or disallows a
temporary one, is honoured once Prefect's settings are read (the server started here is then stopped unused).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from devstack.ports import free_port

log = logging.getLogger("prefect")  # where Prefect says it starts and stops its temporary server

#: Prefect's own switches for its temporary server (prefect.server.api.server.SubprocessASGIServer)
EPHEMERAL_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
PORT_IN_USE = 3
"""uvicorn's exit status when its port was taken between our choosing it and its binding it."""


@dataclass
class TemporaryServer:
    """One temporary Prefect server process on 127.0.0.1."""

    process: subprocess.Popen | None
    port: int

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def ready(self) -> bool:
        """Whether it answers /health now (never blocks for long)."""
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=0.5) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout_s: float) -> float:
        """Block until it answers; the seconds waited. RuntimeError when it exits or stays silent `timeout_s`."""
        t0 = time.monotonic()
        while not self.ready():
            if self.process is None:
                raise RuntimeError("the temporary Prefect server was stopped")
            code = self.process.poll()
            if code == PORT_IN_USE:  # lost the port to another process: start again on a new one, as Prefect does
                self.port, self.process = _spawn()
            elif code is not None:
                raise RuntimeError(f"the temporary Prefect server exited with status {code} before answering")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"the temporary Prefect server did not answer within {timeout_s:.0f} s")
            time.sleep(0.1)
        return time.monotonic() - t0

    def stop(self) -> None:
        """Terminate it (kill after 5 s); idempotent."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        log.info("Stopping temporary server on http://127.0.0.1:%d", self.port)
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_temporary_server() -> TemporaryServer | None:
    """Start the temporary server in the background, unless PREFECT_API_URL names a server; returns at once.

    Registered to stop at exit before Prefect is imported, so it stops after Prefect's own exit handlers have
    flushed the flow's logs and events to it (exit handlers run last-registered first)."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    port, process = _spawn()
    server = TemporaryServer(process, port)
    atexit.register(server.stop)
    return server


@contextmanager
def prefect_api(server: TemporaryServer | None) -> Iterator[float]:
    """Inside: Prefect's client talks to `server` once it answers (its temporary server, as if Prefect had started
    it: no UI link, the server has no UI and ends with the process). Yields the seconds waited for it.

    Without a server, or where Prefect's settings name a server or allow no temporary one, Prefect's own settings
    rule (the server started here is stopped unused)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, get_current_settings, temporary_settings

    settings = get_current_settings()
    if server is None or settings.api.url or not settings.server.ephemeral.enabled:
        if server is not None:
            server.stop()
        yield 0.0
        return
    log.info("Temporary server on http://127.0.0.1:%d, started with the command", server.port)
    waited = server.wait_ready(float(settings.server.ephemeral.startup_timeout_seconds))
    with temporary_settings(updates={PREFECT_API_URL: server.api_url, PREFECT_UI_URL: ""}):
        yield waited


def _spawn() -> tuple[int, subprocess.Popen]:
    """The server process on a free port: Prefect's own command line for its temporary server."""
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip
    return port, subprocess.Popen(command, env={**os.environ, **EPHEMERAL_ENV})
