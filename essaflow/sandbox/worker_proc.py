"""The host's side of one long-lived worker (worker_main.py): its process, and one request and answer at a time,
each bounded by a deadline so that a worker that hangs or dies is noticed rather than waited on."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from essaflow.sandbox.bubblewrap import (
    PACKAGES_DIR,
    SANDBOX_PATH,
    SandboxUnavailable,
    bwrap_argv,
    sandbox_popen_kwargs,
    sandbox_python,
)
from essaflow.sandbox.config import SandboxConfig

_HEADER = struct.Struct(">I")
#: how long a new worker may take to say it is ready (bwrap, then the interpreter, on a loaded machine)
STARTUP_S = 30.0


class WorkerGone(Exception):
    """The worker closed its pipe, missed its deadline or answered something that is not an answer."""


@functools.cache
def _worker_source() -> str:
    # handed over with -c: nothing to read from the host's tree, whatever its permissions and the user's
    return (Path(__file__).parent / "worker_main.py").read_text()


def worker_command(cfg: SandboxConfig, scratch: str | None, info_fd: int | None) -> tuple[list[str], dict]:
    """The worker's command line and subprocess keywords: inside bubblewrap (which writes its sandbox's pid to
    info_fd), or for kind none a plain interpreter in `scratch` with a minimal environment (the limits apply, the
    isolation does not)."""
    limits = {
        "timeout_s": cfg.timeout_s,
        "cpu_s": cfg.cpu_s,
        "memory_mb": cfg.memory_mb,
        "max_processes": cfg.max_processes,
        "file_size_mb": cfg.file_size_mb,
        "output_bytes": cfg.output_bytes,
    }
    if cfg.kind == "bubblewrap":
        limits["path"] = [PACKAGES_DIR] if cfg.packages else []
        bwrap, *options = bwrap_argv(cfg)
        # -S: no site-packages, no .pth files; the packages the snippets may import are cfg.packages alone
        argv = [bwrap, "--info-fd", str(info_fd), *options, sandbox_python(cfg), "-I", "-S", "-c", _worker_source()]
        return [*argv, "--sandboxed", json.dumps(limits)], {**sandbox_popen_kwargs(), "pass_fds": (info_fd,)}
    env = {"PATH": SANDBOX_PATH, "HOME": scratch, "LANG": "C.UTF-8"}
    return [sys.executable, "-I", "-c", _worker_source(), json.dumps(limits)], {"env": env, "cwd": scratch}


class WorkerProcess:
    """One worker process; `request` sends a snippet and waits for its answer, `kill` ends it."""

    def __init__(self, cfg: SandboxConfig):
        self.cfg = cfg
        self._scratch = tempfile.mkdtemp(prefix="essaflow-sandbox-") if cfg.kind == "none" else None
        self._info, info_w = os.pipe() if cfg.kind == "bubblewrap" else (None, None)
        self._init: int | None = None  # a pidfd of the sandbox's pid 1, once the worker said it is ready
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by kill); the worker's own stderr
        argv, kwargs = worker_command(cfg, self._scratch, info_w)
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0, **kwargs
            )
        finally:
            if info_w is not None:
                os.close(info_w)
        os.set_blocking(self.proc.stdin.fileno(), False)  # a hung worker must not block the host on a full pipe
        self._ready = False
        # an answer holds at most output_bytes of text, JSON-escaped (6 bytes a character at worst), and a few fields
        self._max_answer = 6 * cfg.output_bytes + 4096

    def request(self, message: dict, timeout_s: float) -> dict:
        """Send `message` and return the worker's answer within timeout_s; raise WorkerGone when it does not come
        (first waiting for the worker to start, see _await_ready)."""
        if not self._ready:
            self._await_ready()
        deadline = time.monotonic() + timeout_s
        try:
            self._write(json.dumps(message).encode(), deadline)
            return self._read(deadline)
        except (OSError, ValueError) as err:  # a broken pipe, bad JSON
            raise WorkerGone(str(err)) from err

    def _await_ready(self) -> None:
        """Wait for the worker's ready message. Raise SandboxUnavailable, with what the worker wrote on stderr, when
        it does not come: no snippet ran in it yet, so the sandbox itself failed (a missing interpreter, a refused
        namespace), a failure no score of 0 should hide."""
        try:
            if "ready" not in self._read(time.monotonic() + STARTUP_S):
                raise WorkerGone("its first message was not the ready message")
            self._init = self._sandbox_init()
        except (WorkerGone, OSError, ValueError) as err:
            self._stderr.seek(0)
            said = self._stderr.read(2000).decode(errors="replace").strip()
            raise SandboxUnavailable(f"the sandbox worker did not start ({err}) {said}".strip()) from err
        self._ready = True

    def _write(self, body: bytes, deadline: float) -> None:
        data, fd = memoryview(_HEADER.pack(len(body)) + body), self.proc.stdin.fileno()
        while data:
            _wait(fd, deadline, write=True)
            data = data[os.write(fd, data) :]

    def _read(self, deadline: float) -> dict:
        (size,) = _HEADER.unpack(self._read_exact(_HEADER.size, deadline))
        if size > self._max_answer:
            raise WorkerGone(f"an answer of {size} bytes (at most {self._max_answer})")
        answer = json.loads(self._read_exact(size, deadline))
        if not isinstance(answer, dict):
            raise WorkerGone("an answer that is not a JSON object")
        return answer

    def _read_exact(self, n: int, deadline: float) -> bytes:
        buf, fd = bytearray(), self.proc.stdout.fileno()
        while len(buf) < n:
            _wait(fd, deadline, write=False)
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise WorkerGone(f"the worker exited (status {self.proc.poll()})")
            buf += chunk
        return bytes(buf)

    def _sandbox_init(self) -> int | None:
        """A pidfd of the sandbox's pid 1 (bwrap's --info-fd names it), opened while the worker is known alive, so
        that kill never signals a pid the system gave to another process since."""
        if self._info is None:
            return None
        os.set_blocking(self._info, False)  # written before the worker started: no waiting
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._info, 4096):
                data += chunk
        os.close(self._info)
        self._info = None
        return os.pidfd_open(json.loads(data)["child-pid"])

    def kill(self) -> None:
        """End the worker and everything in its sandbox. Killing the sandbox's pid 1 ends its pid namespace and
        bwrap reaps it; killing bwrap, or letting the worker exit, would leave that pid 1 to the system's init, a
        zombie where init does not reap (a container's)."""
        if self._init is not None:
            with contextlib.suppress(ProcessLookupError):  # it ended already (bwrap reaped it)
                signal.pidfd_send_signal(self._init, signal.SIGKILL)
            os.close(self._init)
            self._init = None
        else:  # no sandbox (kind none; its child dies with it) or one that never said it was ready
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self._stderr):
            pipe.close()
        if self._info is not None:
            os.close(self._info)
            self._info = None
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _wait(fd: int, deadline: float, write: bool) -> None:
    left = deadline - time.monotonic()
    ready = select.select([], [fd], [], max(left, 0))[1] if write else select.select([fd], [], [], max(left, 0))[0]
    if not ready:
        raise WorkerGone("the worker missed its deadline (hung, or stopped)")
