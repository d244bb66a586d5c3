"""A long-lived sandbox worker: each snippet it is sent runs in a fresh forked child under rlimits.

Started by essaflow.sandbox.worker_proc as `python -I [-S] -c <this file's text> [--sandboxed] <limits JSON>`
(inside bubblewrap, or a plain subprocess for `sandbox.kind: none`); standard library only, and it imports nothing
from essaflow (the sandbox does not show essaflow's files). The limits' `path` is added to sys.path. Requests and
answers are length-prefixed JSON on stdin and stdout (a 4-byte big-endian length, then the body); the first answer
is `{"ready": pid}`.

Request: `{"code": str, "token": str}`. Answer: `{"end": "exit" | "signal" | "timeout" | "output", "code": int |
None, "output": str, "token": str, "wall_s": float}`. The child writes the token to a pipe of its own only after the
whole snippet ran and exits 0 (an `os._exit(0)` or `sys.exit(0)` before the tests leaves it unwritten); the host
compares it with the one it sent and decides the verdict.
"""

import contextlib
import json
import os
import resource
import selectors
import signal
import struct
import sys
import time

_HEADER = struct.Struct(">I")
_SCRATCH = ("/tmp", "/sandbox", "/dev/shm")  # wiped after every snippet, sandboxed only (/sandbox: bubblewrap.WORK_DIR)
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _IPC_RMID = 1, 4, 0


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(fd):
    head = _read_exact(fd, _HEADER.size)
    body = head and _read_exact(fd, _HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def _send(fd, message):
    data = json.dumps(message).encode()
    data = _HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _prctl(option, value):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")


def _set_limits(limits):
    mib = 1 << 20
    wanted = (
        (resource.RLIMIT_CPU, limits["cpu_s"], limits["cpu_s"] + 1),  # soft: SIGXCPU, hard: SIGKILL a second later
        (resource.RLIMIT_AS, limits["memory_mb"] * mib, limits["memory_mb"] * mib),
        (resource.RLIMIT_NPROC, limits["max_processes"], limits["max_processes"]),
        (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mib, limits["file_size_mb"] * mib),
        (resource.RLIMIT_CORE, 0, 0),
    )
    for which, soft, hard in wanted:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:  # never above the hard limit we were given (that would raise)
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))


def _child(code, token, limits, out_w, tok_w, close):
    """The forked child: its own session, stdio to the capture pipe, the limits, then the snippet. Never returns."""
    try:
        os.setsid()  # a process group of its own: the timeout kills the group
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # a worker killed mid-snippet takes its child along
        for fd in close:  # the host's pipes first: a snippet must not be able to answer for the worker
            os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
        _set_limits(limits)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit raises OSError instead
        sys.argv = ["snippet.py"]
        sys.stdout.reconfigure(line_buffering=True)  # what it printed survives a crash
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as stop:  # sys.exit() ends the snippet before its end: never a pass
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)  # sys.exit("message"), as Python itself would
        _flush()
        os._exit(stop.code if isinstance(stop.code, int) else int(stop.code is not None))
    except BaseException as err:
        import traceback

        # from the snippet's frames on: the worker's own frame above them is noise to whoever reads the output
        traceback.print_exception(type(err), err, err.__traceback__.tb_next)
        _flush()
        os._exit(1)
    _flush()
    os.write(tok_w, token.encode())
    os._exit(0)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the snippet may have closed or replaced them
            stream.flush()


def _watch(pid, out_r, timeout, cap):
    """The child's output until it exits ("exit"), its time is up ("timeout") or its output passes cap ("output")."""
    pidfd = os.pidfd_open(pid)
    sel = selectors.DefaultSelector()
    sel.register(pidfd, selectors.EVENT_READ)
    sel.register(out_r, selectors.EVENT_READ)
    deadline, out = time.monotonic() + timeout, bytearray()
    try:
        while len(out) <= cap:
            left = deadline - time.monotonic()
            ready = {key.fd for key, _ in sel.select(left)} if left > 0 else None
            if not ready:
                return "timeout", out
            if out_r in ready:
                chunk = os.read(out_r, 65536)
                out += chunk
                if not chunk:  # every writer closed; wait for the exit alone
                    sel.unregister(out_r)
            elif pidfd in ready:
                os.set_blocking(out_r, False)  # what it wrote just before exiting, without waiting on its children
                while len(out) <= cap and (chunk := _read_some(out_r)):
                    out += chunk
                return ("exit" if len(out) <= cap else "output"), out
        return "output", out
    finally:
        sel.close()
        os.close(pidfd)


def _read_some(fd):
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


def _kill_the_rest(pid, sandboxed):
    """Whatever the snippet left running: in the sandbox every process of its pid namespace but the worker and
    init (a daemon that left the group included); outside it the child's process group."""
    try:
        if sandboxed:
            os.kill(-1, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _await_the_rest_reaped(deadline_s: float = 5.0) -> None:
    """In the sandbox, until its pid namespace holds only init and this worker: a killed daemon (reparented to
    init, which reaps it on its own time) would otherwise still show in /proc to the next snippet."""
    mine = {1, os.getpid()}
    deadline = time.monotonic() + deadline_s
    while any(int(p) not in mine for p in os.listdir("/proc") if p.isdigit()) and time.monotonic() < deadline:
        time.sleep(0.001)


def _wipe_scratch():
    """What the snippet left in the sandbox for the next one to find: files in /tmp and /dev/shm (their modes
    restored first, they belong to our uid) and SysV IPC objects, which outlive their process."""
    import shutil

    for folder in _SCRATCH:
        os.chmod(folder, 0o755)
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
    import ctypes

    libc = ctypes.CDLL(None)
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        with open(f"/proc/sysvipc/{kind}") as table:
            for line in list(table)[1:]:
                ident = int(line.split()[1])
                if kind == "sem":
                    remove(ident, 0, _IPC_RMID)  # semctl(id, semnum, cmd)
                else:
                    remove(ident, _IPC_RMID, None)  # shmctl/msgctl(id, cmd, buf)


def _run(request, limits, sandboxed, host_fds):
    out_r, out_w = os.pipe()
    tok_r, tok_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(request["code"], request["token"], limits, out_w, tok_w, (out_r, tok_r, *host_fds))
    os.close(out_w)
    os.close(tok_w)
    try:
        end, out = _watch(pid, out_r, limits["timeout_s"], limits["output_bytes"])
        wall = time.monotonic() - start
        _kill_the_rest(pid, sandboxed)  # before reaping: the child's pid (its group's id) cannot be reused yet
        _, status = os.waitpid(pid, 0)
        os.set_blocking(tok_r, False)
        token = _read_some(tok_r)
    finally:
        os.close(out_r)
        os.close(tok_r)
    if sandboxed:
        _await_the_rest_reaped()
        _wipe_scratch()
    code = None
    if end == "exit" and os.WIFSIGNALED(status):
        end, code = "signal", os.WTERMSIG(status)
    elif end == "exit":
        code = os.WEXITSTATUS(status)
    output = bytes(out[: limits["output_bytes"]]).decode("utf-8", "replace")
    return {"end": end, "code": code, "output": output, "token": token.decode("ascii", "replace"), "wall_s": wall}


def _serve():
    limits, sandboxed = json.loads(sys.argv[-1]), "--sandboxed" in sys.argv
    sys.path += limits.get("path", [])  # the folder of the packages the sandbox shows (eval.sandbox.packages)
    if sandboxed and os.getpid() > 3:  # kill(-1) is only safe in a pid namespace of our own
        sys.exit("worker_main: --sandboxed outside a fresh pid namespace")
    host_in, host_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    # the snippets run as our uid: non-dumpable, they can neither ptrace us nor open /proc/<us>/fd (the host's pipes)
    _prctl(_PR_SET_DUMPABLE, 0)
    _send(host_out, {"ready": os.getpid()})
    while (request := _recv(host_in)) is not None:
        _send(host_out, _run(request, limits, sandboxed, (host_in, host_out)))


if __name__ == "__main__":
    _serve()
