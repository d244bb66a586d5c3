"""A started server with its start-up time and memory, for the session fixtures in tests/conftest.py and
tests/integration/conftest.py."""

from __future__ import annotations

import time
from pathlib import Path

from devstack import Service


class Server:
    """A started server with how long it took to answer and its memory (whole process group) right after."""

    def __init__(self, service: Service, state_dir: Path, start_s: float):
        from devstack import rss_mb

        self.service, self.state_dir, self.start_s = service, state_dir, round(start_s, 1)
        self.url = service.url
        self.rss_mb = rss_mb(service.pid)

    def __repr__(self) -> str:
        return f"Server({self.service.name}, {self.url}, start {self.start_s}s, {self.rss_mb} MB)"


def timed_start(start, *args, **kw) -> tuple[Service, float]:
    t0 = time.monotonic()
    svc = start(*args, **kw)
    return svc, time.monotonic() - t0
