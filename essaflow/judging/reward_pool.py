"""Where a reward of your own runs: a small pool of processes of its own (reward_worker.py), one pool per reward and
process, so that nothing the reward does costs more than its own call.

A process starts with this process's interpreter, `sys.path`, environment and folder, and loads the reward from the
source the RewardRef carries (the bytes the config's digest was computed from, checked again there), within the
import deadline. A batch goes over in requests of many calls (the references or problems sent once per request);
each call has its own deadline, timed from the answer before it. A call past its deadline, or one that ends the
process (`os._exit`, a crash, a signal), fails alone: the process (its whole session) is killed, and the batch's
remaining calls go to a fresh one. `sys.exit`, `KeyboardInterrupt` and output floods are caught in the process,
per call. Two processes at most share a large batch; the pools are closed at exit (atexit), and a process whose
parent dies ends itself within a second.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from essaflow.judging.reward_ref import RewardRef, RewardRefError
from essaflow.judging.reward_worker import HEADER

#: how long a new process may take to say it is ready (the interpreter and essaflow's Problem, on a loaded machine)
STARTUP_S = 60.0
#: how long a request may take to be written and acknowledged (its references rebuilt), beside its calls' deadlines
REQUEST_S = 60.0
#: processes per reward. A batch of at least PARALLEL_MIN calls is shared by them when a request showed calls
#: slower than SHARE_ABOVE_S each (the first such batch sends PROBE calls first to see); a quick reward's batch
#: goes in one request to one process, as the pipes, not the reward, are then the cost (bench/reward_isolation.py)
WORKERS = 2
PARALLEL_MIN = 64
PROBE = 32
SHARE_ABOVE_S = 100e-6
#: largest answer frame accepted (an answer holds a number, a few components or a capped message)
MAX_FRAME = 1 << 20
_BOOT = "import json, sys; sys.path[:] = json.loads(sys.argv[1]); import essaflow.judging.reward_worker as w; w.main()"
_SIGNALS = {int(s): s.name for s in signal.Signals}


@dataclass(frozen=True)
class Failure:
    """A call that gave no score. kind: raised (an exception), value (not a finite number), exit (sys.exit,
    KeyboardInterrupt), output (printed past the cap), timeout (past its deadline), ended (the process ended)."""

    kind: str
    error: str
    message: str

    @property
    def costly(self) -> bool:
        """A failure that cost a deadline or a process: the circuit breaker counts these."""
        return self.kind in ("timeout", "ended")


class _Lost(Exception):
    """The process missed a deadline, ended, or answered nonsense (`failure` says which, for the call in flight)."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class _Stopped(Exception):
    """Another part of the batch failed: this request was abandoned."""


class RewardProcess:
    """One reward process: started and sent the reward at once; `loaded()` waits for the import."""

    def __init__(self, ref: RewardRef, import_s: float | None):
        self.ref, self.import_s = ref, import_s
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by kill); what the process says before ready
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0,
            start_new_session=True,  # a group of its own: kill takes what the reward started, Ctrl-C does not reach it
        )  # fmt: skip
        os.set_blocking(self.proc.stdin.fileno(), False)
        self._buf, self._at = bytearray(), 0
        self._parsed: deque[Any] = deque()  # frames read and parsed, not yet taken
        self._with_problem: bool | None = None
        self.status = "running"
        """How the process ended, once it did (exit status, signal)."""
        self._started = time.monotonic()
        spec = {"source": ref.source, "digest": ref.digest, "origin": ref.origin, "function": ref.function,
                "package": ref.package}  # fmt: skip
        with contextlib.suppress(_Lost):  # it ended already: loaded() says how
            self._write({"load": spec}, self._started + STARTUP_S)

    def alive(self) -> bool:
        """Whether the process runs, asked without reaping it: its pid stays its group's until kill() (or
        _ended()) has killed the group, so that nothing the reward started outlives it."""
        if self.proc.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:  # reaped already
            return False

    def loaded(self) -> bool:
        """Wait for the reward's import; whether it takes the problem. RewardRefError naming the reward when the
        process does not start, the import raises, ends the process or runs past the import deadline."""
        if self._with_problem is not None:
            return self._with_problem
        label = f"eval.reward {self.ref.ref!r}"
        try:
            ready = self._frame(self._started + STARTUP_S)
            if not isinstance(ready, dict) or "ready" not in ready:
                raise _Lost(Failure("ended", "", "its first message was not the ready message"))
        except _Lost as lost:
            self._stderr.seek(0)
            said = self._stderr.read(2000).decode(errors="replace").strip()
            why = f"not ready within {STARTUP_S:g} s" if lost.failure.kind == "timeout" else str(lost)
            raise RewardRefError(f"{label}: the reward's process did not start ({why}) {said}".strip()) from None
        # the import's deadline runs from when the process was ready (its monotonic clock is this one's)
        start = min(float(ready.get("t", time.monotonic())), time.monotonic())
        try:
            answer = self._frame(None if not self.import_s else start + self.import_s)
        except _Lost as lost:
            if lost.failure.kind == "timeout":
                raise RewardRefError(
                    f"{label}: importing {self.ref.origin} took longer than {self.import_s:g} s (its top-level code "
                    "runs in each reward process under the reward's deadline, eval.reward_timeout_s): stopped"
                ) from None
            raise RewardRefError(f"{label}: importing {self.ref.origin} ended the reward's process ({self.status}): "
                                 "os._exit, a crash or a signal at its top level") from None  # fmt: skip
        if not isinstance(answer, dict) or not ("loaded" in answer or "error" in answer):
            raise RewardRefError(f"{label}: the reward's process answered the import with {answer!r:.200}")
        _show(answer.get("o"))
        if "error" in answer:
            raise RewardRefError(f"{label}: {answer['error']}")
        self._with_problem = bool(answer["problem"])
        return self._with_problem

    def results(self, request: dict[str, Any], n: int, timeout_s: float | None, stop: threading.Event) -> Iterator[Any]:
        """Send one request of n calls; yield each call's answer frame in order. _Lost for the call in flight when
        the process misses its deadline or ends; _Stopped when `stop` is set while waiting."""
        self._write(request, time.monotonic() + REQUEST_S)
        go = self._frame(time.monotonic() + REQUEST_S + (timeout_s or 0), stop)
        if not isinstance(go, dict) or go.get("go") != n:
            raise _Lost(Failure("ended", "", f"the reward's process answered {go!r:.200} to a request"))
        for _ in range(n):
            yield self._frame(None if not timeout_s else time.monotonic() + timeout_s, stop, timeout_s)

    def _write(self, message: dict[str, Any], deadline: float) -> None:
        body = json.dumps(message).encode()
        data, fd = memoryview(HEADER.pack(len(body)) + body), self.proc.stdin.fileno()
        try:
            while data:
                self._wait(fd, deadline, None, write=True)
                data = data[os.write(fd, data) :]
        except (BrokenPipeError, OSError) as err:
            raise _Lost(self._ended(f"its pipe broke: {err}")) from None

    def _frame(self, deadline: float | None, stop: threading.Event | None = None,
               timeout_s: float | None = None) -> Any:  # fmt: skip
        """The next answer frame, waiting for it until `deadline`. Every whole frame already read is parsed at once
        (one json.loads for many small answers: the per-call cost of a quick reward is the pipe's, not its own)."""
        while not self._parsed:
            bodies = self._bodies()
            if bodies:
                try:
                    self._parsed.extend(json.loads(b"[" + b",".join(bodies) + b"]"))
                except ValueError:
                    raise _Lost(Failure("ended", "", "the reward's process sent an unreadable answer")) from None
                continue
            self._wait(self.proc.stdout.fileno(), deadline, stop, write=False, timeout_s=timeout_s)
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            except OSError as err:
                raise _Lost(self._ended(f"its pipe broke: {err}")) from None
            if not chunk:
                raise _Lost(self._ended(""))
            self._buf += chunk
        return self._parsed.popleft()

    def _bodies(self) -> list[bytes]:
        """The bodies of the whole frames in the buffer, taken out of it."""
        buf, at, out = self._buf, self._at, []
        while len(buf) - at >= HEADER.size:
            (size,) = HEADER.unpack_from(buf, at)
            if size > MAX_FRAME:
                raise _Lost(Failure("ended", "", f"the reward's process sent {size} bytes (at most {MAX_FRAME})"))
            if len(buf) < at + HEADER.size + size:
                break
            out.append(bytes(buf[at + HEADER.size : at + HEADER.size + size]))
            at += HEADER.size + size
        if at > 1 << 16 or at == len(buf):  # drop what was read, now and then (not per frame)
            del buf[:at]
            at = 0
        self._at = at
        return out

    def _wait(self, fd: int, deadline: float | None, stop: threading.Event | None, write: bool,
              timeout_s: float | None = None) -> None:  # fmt: skip
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            step = left if stop is None else min(0.1 if left is None else left, 0.1)
            step = None if step is None else max(step, 0)
            ready = select.select([], [fd], [], step)[1] if write else select.select([fd], [], [], step)[0]
            if ready:
                return
            if stop is not None and stop.is_set():
                raise _Stopped()
            if deadline is not None and time.monotonic() >= deadline:
                limit = f"eval.reward_timeout_s={timeout_s:g} s" if timeout_s else "its deadline"
                raise _Lost(Failure("timeout", "TimeoutError", f"no result within {limit}: the call was stopped and "
                                                               "the reward's process replaced"))  # fmt: skip

    def _ended(self, detail: str) -> Failure:
        deadline = time.monotonic() + 2  # its pipe closed: it is ending (or closed the pipe itself, and is killed)
        while (running := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._kill_group()  # what the reward started, while the pid is still its group's
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        code = None if running else self.proc.returncode
        if code is None:
            status = "its pipe closed"
        elif code < 0:
            status = f"killed by {_SIGNALS.get(-code, f'signal {-code}')}"
        else:
            status = f"exit status {code}"
        self.status = status + (f"; {detail}" if detail else "")
        return Failure("ended", "ProcessEnded", f"the reward's process ended ({self.status}): os._exit, a crash or a "
                                                "signal in the reward")  # fmt: skip

    def _kill_group(self) -> None:
        if self.proc.returncode is None:  # not reaped: its pid (its group's id) cannot have been reused
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own group (start_new_session)

    def kill(self) -> None:
        """End the process and its session (anything the reward started), and reap it."""
        self._kill_group()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL is not ignored: not reached
            self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout, self._stderr):
            with contextlib.suppress(OSError):
                pipe.close()


def _show(text: Any) -> None:
    """What the reward printed (capped by the process): on this process's stderr, where a print would have gone."""
    if text:
        with contextlib.suppress(Exception):
            sys.stderr.write(str(text) if str(text).endswith("\n") else f"{text}\n")


class Breaker:
    """Counts calls in a row that cost a deadline or a process (a success resets it); `limit` of them trips it
    (0: never, for eval.reward_errors: fail, whose first failure stops the batch anyway)."""

    def __init__(self, limit: int):
        self.limit, self.in_a_row, self.tripped_at = limit, 0, None
        self._lock = threading.Lock()

    def record(self, index: int, failure: Failure | None) -> bool:
        """Count one call's outcome; True when this one trips the breaker."""
        with self._lock:
            if failure is None:
                self.in_a_row = 0
            elif failure.costly:
                self.in_a_row += 1
                if self.limit and self.in_a_row >= self.limit and self.tripped_at is None:
                    self.tripped_at = index
                    return True
            return False


class _Batch:
    """One `RewardPool.call` under way: its calls, what they gave (`results`, aligned with them: a number,
    (number, components), a Failure, or None when the batch stopped first), and the requests left to send."""

    def __init__(self, pool: RewardPool, refs: Sequence[Any], calls: Sequence[tuple[str, int]],
                 timeout_s: float | None, stop_on_error: bool, breaker: Breaker):  # fmt: skip
        self.pool, self.refs, self.calls, self.timeout_s = pool, refs, calls, timeout_s
        self.stop_on_error, self.breaker = stop_on_error, breaker
        n = len(calls)
        self.results: list[Any] = [None] * n
        self.stopped = False
        self.fatal: RewardRefError | None = None
        """The reward could not be loaded again in a fresh process."""
        self.shareable = WORKERS > 1 and n >= PARALLEL_MIN
        if not self.shareable or (pool.per_call_s is not None and not pool.slow()):
            spans = [(0, n)] if n else []  # one request: a quick reward, or a small batch
        elif pool.per_call_s is None:
            spans = [(0, PROBE), (PROBE, n)]  # a first request shows how slow the reward is (share())
        else:
            spans = _pieces(0, n)
        self.todo = deque(spans)
        self._stop, self._lock = threading.Event(), threading.Lock()
        self.helper: Future | None = None
        """The second process's share, once the reward showed itself slow enough to be worth one."""

    def share(self) -> None:
        """Hand the rest of the batch to a second process too (in pieces, for both to take from), when requests
        are left, the reward is slow and no other batch holds the second process."""
        with self._lock:
            if self.helper is not None or not self.shareable or not self.todo or not self.pool.slow():
                return
            try:
                spare = self.pool._slots.get_nowait()
            except queue.Empty:
                return
            if len(self.todo) == 1:
                self.todo = deque(_pieces(*self.todo[0]))
            self.helper = self.pool._threads.submit(self.drive, spare)

    def halt(self) -> None:
        self.stopped = True
        self._stop.set()

    def _next(self) -> tuple[int, int] | None:
        with self._lock:
            return self.todo.popleft() if self.todo and not self._stop.is_set() else None

    def _request(self, a: int, b: int) -> dict[str, Any]:
        used = sorted({j for _, j in self.calls[a:b]})  # each reference or problem once per request
        where = {j: i for i, j in enumerate(used)}
        calls = [[c, where[j]] for c, j in self.calls[a:b]]
        return {"refs": [self.refs[j] for j in used], "calls": calls, "stop": self.stop_on_error}

    def drive(self, proc: RewardProcess | None) -> None:
        """Send requests to `proc` (a fresh process when it is None or ended) until none is left or the batch
        stops; the process goes back to the pool's slots, or None when it was killed."""
        try:
            while (span := self._next()) is not None:
                if proc is None or not proc.alive():
                    self.pool._drop(proc)
                    proc = self.pool._spawn()
                current, proc = proc, None  # out of the slots' reach while a request is under way
                try:
                    current.loaded()
                except RewardRefError as err:
                    self.pool._drop(current)
                    self.fatal = err
                    self.halt()
                    return
                except BaseException:  # interrupted mid-answer: out of step with its pipe, never reused
                    self.pool._drop(current)
                    raise
                proc = self._send(current, *span)
                self.share()
        finally:
            self.pool._slots.put(proc)

    def _send(self, proc: RewardProcess, a: int, b: int) -> RewardProcess | None:
        """One request of calls a..b-1 on `proc`; the process, or None when it was killed (a call past its deadline
        or one that ended it: the calls after it go back to the queue; or this thread interrupted mid-request)."""
        k, start = a, time.monotonic()
        try:
            for frame in proc.results(self._request(a, b), b - a, self.timeout_s, self._stop):
                result = self.results[k] = _decode(frame)
                failure = result if isinstance(result, Failure) else None
                self.breaker.record(k, failure)  # a frame is never a costly failure: no trip here
                k += 1
                if failure and self.stop_on_error:
                    self.halt()
                    break  # the process ended the request after this call too ("stop"): still in step
        except _Stopped:
            self.pool._drop(proc)
            return None
        except _Lost as lost:
            self.results[k] = lost.failure
            self.pool._drop(proc)
            if k + 1 < b:
                with self._lock:
                    self.todo.appendleft((k + 1, b))
            if self.breaker.record(k, lost.failure) or self.stop_on_error:
                self.halt()
            return None
        except BaseException:  # KeyboardInterrupt here, say: answers may be pending on its pipe
            self.pool._drop(proc)
            raise
        if k > a:
            self.pool.per_call_s = (time.monotonic() - start) / (k - a)
        return proc


class RewardPool:
    """The processes of one reward in this process (WORKERS at most, started when needed)."""

    def __init__(self, ref: RewardRef, import_s: float | None):
        self.ref, self.import_s = ref, import_s
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._live: set[RewardProcess] = set()
        self.closed = False
        first = self._spawn()
        try:
            self.with_problem = first.loaded()
        except BaseException:
            self._drop(first)
            raise
        self._slots: queue.SimpleQueue[RewardProcess | None] = queue.SimpleQueue()
        self._slots.put(first)
        for _ in range(WORKERS - 1):
            self._slots.put(None)
        self._threads = ThreadPoolExecutor(WORKERS - 1, thread_name_prefix="reward") if WORKERS > 1 else None
        self.per_call_s: float | None = None
        """Seconds a call took in the last request (pipes included)."""

    def slow(self) -> bool:
        """Whether the reward's calls are slow enough for a second process to pay (WORKERS > 1, 2+ cores)."""
        return self.per_call_s is not None and self.per_call_s > SHARE_ABOVE_S and (os.cpu_count() or 1) > 1

    def _spawn(self) -> RewardProcess:
        with self._lock:
            if self.closed:  # closed (at exit) while a batch was under way: start nothing more
                raise RuntimeError("the reward pool is closed")
            proc = RewardProcess(self.ref, self.import_s)
            self._live.add(proc)
        return proc

    def _drop(self, proc: RewardProcess | None) -> None:
        if proc is not None:
            proc.kill()
            with self._lock:
                self._live.discard(proc)

    def call(self, refs: Sequence[Any], calls: Sequence[tuple[str, int]], timeout_s: float | None,
             stop_on_error: bool, breaker: Breaker) -> _Batch:  # fmt: skip
        """Call the reward on each (completion, index into refs), over at most WORKERS processes. With
        `stop_on_error` the batch stops at its first failure; the breaker stops it after its limit of costly ones."""
        if self.closed:
            raise RuntimeError("the reward pool is closed")
        batch = _Batch(self, refs, calls, timeout_s, stop_on_error, breaker)
        batch.share()  # at once when an earlier batch showed the reward slow; else after its first request
        if batch.todo:
            batch.drive(self._slots.get())
        if batch.helper is not None:
            batch.helper.result()
        return batch

    def close(self) -> None:
        """Kill every process of this pool (idempotent; a forked child leaves its parent's alone)."""
        with self._lock:
            if self.closed or os.getpid() != self._pid:
                return
            self.closed = True
            live = list(self._live)
            self._live.clear()
        for proc in live:
            proc.kill()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)


def _pieces(a: int, b: int) -> list[tuple[int, int]]:
    """Calls a..b-1 in WORKERS x 2 requests: two processes take them in turn, however fast each one is."""
    size = max(16, -(-(b - a) // (WORKERS * 2)))
    return [(i, min(i + size, b)) for i in range(a, b, size)]


def _decode(frame: Any) -> Any:
    """A call's answer frame as a number, (number, components) or a Failure."""
    if type(frame) is float or type(frame) is int:
        return float(frame)
    if isinstance(frame, dict):
        _show(frame.get("o"))
        if "e" in frame:
            return Failure(str(frame.get("k", "raised")), str(frame["e"]), str(frame.get("m", "")))
        if "v" in frame:
            parts = frame.get("p")
            return (float(frame["v"]), {str(k): float(v) for k, v in parts.items()}) if parts else float(frame["v"])
    return Failure("ended", "ProcessEnded", f"the reward's process sent {frame!r:.200}")


_POOLS: dict[tuple[RewardRef, float | None], RewardPool] = {}
_POOLS_LOCK = threading.Lock()
_POOLS_PID = [os.getpid()]


def reward_pool(ref: RewardRef, import_s: float | None) -> RewardPool:
    """This process's pool for `ref` (one per reward and import deadline), its first process started and the
    reward loaded in it: RewardRefError when it cannot be."""
    with _POOLS_LOCK:
        if _POOLS_PID[0] != os.getpid():  # a forked child: its parent's processes are not its own
            _POOLS.clear()
            _POOLS_PID[0] = os.getpid()
        key = (ref, import_s)
        pool = _POOLS.get(key)
        if pool is None or pool.closed:
            pool = _POOLS[key] = RewardPool(ref, import_s)
        return pool


def close_pools() -> None:
    """Kill every reward process this process started (at exit, and for tests)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values()) if _POOLS_PID[0] == os.getpid() else []
        _POOLS.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)
