"""A pool of long-lived sandbox workers: snippets of Python in, one verdict each out.

bwrap and the interpreter are started once per worker; each snippet then runs in a child the worker forks, under
the config's limits (worker_main.py). A batch is spread over the workers concurrently and comes back in order. A
worker that dies or hangs (the snippet killed or stopped it) is killed, its snippet scores `error`, and the next
snippet on that slot gets a fresh worker.
"""

from __future__ import annotations

import atexit
import hmac
import os
import queue
import secrets
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from essaflow.sandbox.bubblewrap import require_bubblewrap
from essaflow.sandbox.config import SandboxConfig
from essaflow.sandbox.worker_proc import WorkerGone, WorkerProcess

Status = Literal["passed", "failed", "timeout", "crashed", "error"]
#: how long past the snippet's own limit the host waits for a worker's answer before it calls the worker hung
GRACE_S = 5.0


@dataclass(frozen=True)
class Outcome:
    """What one snippet did. ok: it exited 0 having run to its end (the child's token arrived).

    status: passed (ok); failed (an exception, a non-zero exit, an exit before its end, output over the cap);
    timeout (the wall limit or RLIMIT_CPU); crashed (killed by a signal: a segfault, an abort); error (its worker
    died or hung and was replaced). exit_code: the exit status, minus the signal number for a crash, None for a
    timeout or an error. output: stdout and stderr together, at most cfg.output_bytes, plus a note from the pool
    when it stopped the snippet."""

    ok: bool
    status: Status
    exit_code: int | None
    output: str
    wall_s: float


class SandboxPool:
    """cfg.workers long-lived workers (bubblewrap, or plain subprocesses for kind none); `run` is thread-safe."""

    def __init__(self, cfg: SandboxConfig | None = None):
        self.cfg = cfg or SandboxConfig()
        if self.cfg.kind == "bubblewrap":
            require_bubblewrap(self.cfg)
        self._pid = os.getpid()
        self._closed = False
        self._lock = threading.Lock()
        # a slot is a worker or None (lost, replaced on next use): the pool never shrinks when a start fails
        self._slots: queue.SimpleQueue[WorkerProcess | None] = queue.SimpleQueue()
        started: list[WorkerProcess] = []
        try:
            for _ in range(self.cfg.workers):
                started.append(WorkerProcess(self.cfg))
        except BaseException:
            for worker in started:
                worker.kill()
            raise
        for worker in started:
            self._slots.put(worker)
        self._threads = ThreadPoolExecutor(self.cfg.workers, thread_name_prefix="sandbox")
        atexit.register(self.close)

    @property
    def closed(self) -> bool:
        """Whether close() ran."""
        return self._closed

    def run(self, snippets: Sequence[str]) -> list[Outcome]:
        """Run each snippet in a fresh sandboxed child, concurrently over the workers; outcomes in input order."""
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        return list(self._threads.map(self._run_one, snippets))

    def _run_one(self, code: str) -> Outcome:
        worker = self._slots.get()
        start, token = time.monotonic(), secrets.token_hex(16)
        try:
            worker = worker or WorkerProcess(self.cfg)
            answer = worker.request({"code": code, "token": token}, self.cfg.timeout_s + GRACE_S)
        except WorkerGone as gone:
            worker.kill()
            worker = None
            note = f"[sandbox worker lost ({gone}); the snippet may have killed or stopped it; replaced]"
            return Outcome(False, "error", None, note, time.monotonic() - start)
        except BaseException:  # the sandbox would not start (SandboxUnavailable): the caller hears of it
            if worker is not None:
                worker.kill()
                worker = None
            raise
        finally:
            self._slots.put(worker)
        return verdict(answer, token, self.cfg)

    def close(self) -> None:
        """Stop the workers (idempotent; also runs at exit). Runs in flight finish first."""
        with self._lock:
            if self._closed or os.getpid() != self._pid:  # a forked child must not kill its parent's workers
                return
            self._closed = True
        atexit.unregister(self.close)
        self._threads.shutdown(wait=True, cancel_futures=True)
        while True:
            try:
                worker = self._slots.get_nowait()
            except queue.Empty:
                break
            if worker is not None:
                worker.kill()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verdict(answer: dict, token: str, cfg: SandboxConfig) -> Outcome:
    """The outcome a worker's answer stands for; a pass needs exit 0 and the token the host sent."""
    end, code = answer.get("end"), answer.get("code")
    output, wall = str(answer.get("output", ""))[: cfg.output_bytes], float(answer.get("wall_s", 0.0))
    if end == "exit" and code == 0 and hmac.compare_digest(str(answer.get("token", "")), token):
        return Outcome(True, "passed", 0, output, wall)
    if end == "exit":
        note = "" if code else "\n[exited 0 before the snippet's end]"
        return Outcome(False, "failed", code, output + note, wall)
    if end == "signal" and isinstance(code, int):
        status = "timeout" if code == signal.SIGXCPU else "crashed"
        return Outcome(False, status, -code, output + f"\n[killed by signal {code}]", wall)
    if end == "timeout":
        return Outcome(False, "timeout", None, output + f"\n[stopped after {cfg.timeout_s:g} s]", wall)
    if end == "output":
        return Outcome(False, "failed", None, output + f"\n[output over {cfg.output_bytes} bytes: stopped]", wall)
    return Outcome(False, "error", None, f"[unreadable answer from the sandbox worker: {answer!r:.200}]", wall)
