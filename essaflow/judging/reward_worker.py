"""A reward process: a reward of your own is defined and called here, never in the process that trains or checks.

Started by essaflow.judging.reward_pool as `python -c <bootstrap> <sys.path as JSON>`, in a session of its own, with
the parent's environment and folder. Standard library only, but for essaflow's `Problem` (imported once at start, so
a reward that takes the problem gets the real model). Messages on the pipes are length-prefixed JSON (a 4-byte
big-endian length, then the body), as the sandbox's workers speak (essaflow/sandbox/worker_proc.py):

- first answer: `{"ready": pid, "t": time.monotonic()}`;
- `{"load": {"source", "digest", "origin", "function"}}`: the source is checked against its SHA-256, then run as a
  module (its top-level code, its imports) and the function looked up and its signature checked. Answer
  `{"loaded": true, "problem": bool}` (whether the second parameter is named `problem`) or `{"error": text}`;
- `{"refs": [...], "calls": [[completion, index into refs], ...], "stop": bool}`: each ref is a reference answer
  (text) or a Problem as its JSON dict, rebuilt here once per request. Answer `{"go": n}`, then one frame per call,
  in order: a bare number (the reward), `{"v": reward, "p": {name: number}}` (components), or
  `{"e": type, "m": message, "k": kind}`; any of them as a dict may carry `"o"`, what the call printed (at most
  OUTPUT_KEEP characters a request). With `"stop"`, the request ends after its first failed call.

The host times each call from the frame before it, and kills this process (its whole session: anything the reward
started too) when a call runs past its deadline. `sys.exit`, `KeyboardInterrupt` and any other exception are caught
per call; `os._exit`, a crash or a signal end the process, and the host starts a fresh one. What the reward prints
goes to a capture of its own (fds 1 and 2 are /dev/null; the protocol runs on copies of the original pipes), so it
can neither corrupt the answers nor flood the terminal: more than OUTPUT_CAP characters in one call fail that call.
The process ends when its stdin closes, or within a second of its parent's death.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import math
import numbers
import os
import reprlib
import signal
import struct
import sys
import threading
import time
import types
from collections.abc import Callable, Mapping
from typing import Any

HEADER = struct.Struct(">I")
#: characters one call may print before it fails ("printed more than ...")
OUTPUT_CAP = 1_000_000
#: characters of what a request's calls printed that are sent back to the host (it writes them on its stderr)
OUTPUT_KEEP = 2000
#: named components a reward may return (each is logged as a metric)
MAX_COMPONENTS = 64
#: characters of a returned value, or of an exception's message, quoted in an error
QUOTE = 200

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = QUOTE
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 8
_repr.maxlevel = 3


def quote(value: Any) -> str:
    """repr(value), at most QUOTE characters (a 2-million-item list is not spelled out), never raising."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr raises is named by its type
        text = f"<{type(value).__name__} whose repr raised>"
    return text if len(text) <= QUOTE else text[: QUOTE - 3] + "..."


def message(err: BaseException) -> str:
    """str(err), at most QUOTE characters."""
    try:
        text = str(err)
    except Exception:  # noqa: BLE001
        text = f"<{type(err).__name__} whose message raised>"
    return text if len(text) <= QUOTE else text[: QUOTE - 3] + "..."


_SCORE = "a reward returns a number or a mapping of named numbers, each finite"


def as_score(value: Any) -> tuple[float, dict[str, float] | None]:
    """(reward, components or None) of what a reward returned. TypeError when it is no number or mapping of
    numbers; ValueError when a number is inf, -inf or nan (or the components are too many, or sum past a float)."""
    if isinstance(value, Mapping):
        if len(value) > MAX_COMPONENTS:
            raise ValueError(f"returned {len(value)} components (at most {MAX_COMPONENTS}): {quote(value)}")
        parts = {str(k): _number(v, value) for k, v in value.items()}
        total = math.fsum(parts.values())
        if not math.isfinite(total):
            raise ValueError(f"returned components that sum to {total}: {quote(value)}; {_SCORE}")
        return total, parts
    return _number(value, value), None


def _number(v: Any, returned: Any) -> float:
    if not isinstance(v, numbers.Real):  # int, float, bool, numpy's integers and floats, Fraction
        raise TypeError(f"returned {quote(returned)}: {_SCORE}")
    try:
        f = float(v)
    except (OverflowError, ValueError, TypeError):
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"returned {quote(returned)}: {_SCORE} (not inf, -inf or nan)")
    return f


def takes_problem(fn: Callable[..., Any]) -> bool:
    """True when `fn`'s second parameter is named `problem` (it receives the Problem, not the reference text)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return len(params) >= 2 and params[1].name == "problem"


def function_error(fn: Any, module: types.ModuleType, origin: str, function: str) -> str | None:
    """Why `fn`, looked up as `function` in the module run from `origin`, is no reward defined there (None: it is)."""
    if not callable(fn):
        defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and not k.startswith("_"))
        return f"{origin} defines no function {function!r} (functions there: {defined})"
    owner = imported_from(fn, module)
    if owner:
        return (f"{origin} imports {function} from {owner} rather than defining it, and eval.reward_digest covers "
                f"{origin}'s text only: name the module that defines it ({owner}:{fn.__name__})")  # fmt: skip
    return None


def signature_error(fn: Callable[..., Any]) -> str | None:
    """Why `fn` cannot be called with two positional arguments, or None."""
    try:
        inspect.signature(fn).bind("completion", "problem")
    except TypeError as e:
        return f"{getattr(fn, '__name__', fn)} must take (completion, problem) or (completion, reference): {e}"
    except ValueError:  # a builtin without a signature: trust it
        pass
    return None


def define_module(source: str, origin: str, digest: str, package: str | None) -> types.ModuleType:
    """A fresh module (`essaflow_reward_<digest>`, registered in sys.modules) run from `source`: whatever its
    top-level code raises propagates. `package`: the installed package a module reward (`package.module:fn`)
    belongs to, so that its relative imports (`from .util import x`) import from that package; None for a file
    reward, whose text stands alone."""
    module = types.ModuleType(f"essaflow_reward_{digest[:16]}")
    module.__file__ = origin
    if package is not None:
        module.__package__ = package
    sys.modules[module.__name__] = module  # dataclasses and pickling look their module up by name
    exec(compile(source, origin, "exec"), module.__dict__)
    return module


def import_hint(err: BaseException, origin: str, package: str | None) -> str:
    """What to do about `err`, raised by a reward file's top-level code, when it is an import the file cannot make
    because it is defined from its own text ('' otherwise): a sibling module, or a relative import."""
    if package is not None or not isinstance(err, ImportError):
        return ""
    folder = os.path.dirname(origin)
    top = (getattr(err, "name", None) or "").partition(".")[0]
    sibling = top and (os.path.isfile(os.path.join(folder, f"{top}.py")) or os.path.isdir(os.path.join(folder, top)))
    if isinstance(err, ModuleNotFoundError) and sibling:
        return (f" ({top} is beside it: a reward file is defined from its own text alone, the text "
                "eval.reward_digest covers and the reward's processes and Ray workers receive, so it cannot import "
                f"its sibling files: copy what it needs from {top} into it, or make the folder an installed package "
                "and name the reward package.module:function)")  # fmt: skip
    if "no known parent package" in str(err):
        return (" (a reward file is defined from its own text, outside any package: import absolutely, or name the "
                "reward package.module:function when it is a module of an installed package)")  # fmt: skip
    return ""


def imported_from(fn: Any, module: types.ModuleType) -> str | None:
    """The module a reward function of `module` was defined in when that is another one: a function its source
    imports (`from pkg.impl import score`) rather than defines, whose code eval.reward_digest would not cover.
    None for a function the source defines, wraps (functools.wraps) or makes by a call (a factory's closure)."""
    owner = getattr(fn, "__module__", None)
    if not inspect.isfunction(fn) or owner in (None, module.__name__) or "<locals>" in fn.__qualname__:
        return None
    return owner


# ----------------------------------------------------------------------------------------------- the process


class OutputOverCap(RuntimeError):
    """What a call printed passed OUTPUT_CAP."""


class _Capture(io.TextIOBase):
    """sys.stdout and sys.stderr of the reward: counts what a call prints, keeps the first OUTPUT_KEEP characters of
    a request, and raises once a call printed more than OUTPUT_CAP."""

    def __init__(self) -> None:
        self.count = 0
        self.kept: list[str] = []
        self.room = OUTPUT_KEEP
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self.count += len(s)
        if self.count > OUTPUT_CAP:
            raise OutputOverCap(f"printed more than {OUTPUT_CAP:,} characters in one call")
        shown = s[: self.room]
        if shown:
            self.kept.append(shown)
            self.room -= len(shown)
        self.dropped += len(s) - len(shown)
        return len(s)

    def take(self) -> str:
        text, self.kept = "".join(self.kept), []
        return text


class _Worker:
    def __init__(self, proto_in: int, proto_out: int, out: _Capture):
        self.proto_in, self.proto_out, self.out = proto_in, proto_out, out
        self.fn: Callable[..., Any] | None = None
        self.with_problem = False

    def send(self, message: Any) -> None:
        data = json.dumps(message, allow_nan=False).encode()
        data = HEADER.pack(len(data)) + data
        while data:
            data = data[os.write(self.proto_out, data) :]

    def recv(self) -> Any:
        head = self._read_exact(HEADER.size)
        body = head and self._read_exact(HEADER.unpack(head)[0])
        return None if body is None else json.loads(body)

    def _read_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(self.proto_in, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def load(self, spec: dict[str, Any]) -> dict[str, Any]:
        source, origin, function = spec["source"], spec["origin"], spec["function"]
        if hashlib.sha256(source.encode()).hexdigest() != spec["digest"]:
            return {"error": f"the source sent for {origin} does not match its digest {spec['digest'][:12]}"}
        package = spec.get("package")
        self.out.count = 0
        try:
            module = define_module(source, origin, spec["digest"], package)
        except SyntaxError as e:
            return self._said({"error": f"syntax error in {origin}, line {e.lineno}: {e.msg}"})
        except OutputOverCap as e:
            return self._said({"error": f"importing {origin} {e}"})
        except BaseException as e:  # noqa: BLE001 - sys.exit and KeyboardInterrupt at its top level too
            hint = import_hint(e, origin, package)
            return self._said({"error": f"importing {origin} raised {type(e).__name__}: {message(e)}{hint}"})
        fn = getattr(module, function, None)
        wrong = function_error(fn, module, origin, function) or signature_error(fn)
        if wrong:
            return self._said({"error": wrong})
        self.fn, self.with_problem = fn, takes_problem(fn)
        return self._said({"loaded": True, "problem": self.with_problem})

    def _said(self, answer: dict[str, Any]) -> dict[str, Any]:
        text = self.out.take()
        return {**answer, "o": text} if text else answer

    def calls(self, request: dict[str, Any]) -> None:
        refs: list[Any] = request["refs"]
        if self.with_problem:
            from essaflow.data.schema import Problem

            refs = [Problem.model_validate(r) for r in refs]
        calls, stop, fn, out = request["calls"], request.get("stop", False), self.fn, self.out
        out.room, out.dropped = OUTPUT_KEEP, 0
        self.send({"go": len(calls)})
        for n, (completion, j) in enumerate(calls):
            out.count = 0
            frame: Any
            try:
                frame = _frame(fn(completion, refs[j]))
            except OutputOverCap as e:
                frame = {"e": "OutputOverCap", "m": f"the reward {e}", "k": "output"}
            except Exception as e:  # noqa: BLE001 - the host's policy decides (fail naming the problem, or zero)
                frame = {"e": type(e).__name__, "m": message(e), "k": "raised"}
            except SystemExit as e:
                frame = {"e": "SystemExit", "m": f"the reward called sys.exit({quote(e.code)})", "k": "exit"}
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt, GeneratorExit: this call only
                frame = {"e": type(e).__name__, "m": f"raised in the reward {message(e)}".strip(), "k": "exit"}
            if out.count > OUTPUT_CAP:  # it caught the OutputOverCap itself
                frame = {"e": "OutputOverCap", "m": f"the reward printed more than {OUTPUT_CAP:,} characters in "
                                                    "one call", "k": "output"}  # fmt: skip
            text = out.take()
            last = n == len(calls) - 1 or (stop and isinstance(frame, dict) and "e" in frame)
            if text or (last and out.dropped):
                frame = frame if isinstance(frame, dict) else {"v": frame}
                frame["o"] = text + (f"\n[{out.dropped:,} more characters not shown]" if last and out.dropped else "")
            self.send(frame)
            if last and n < len(calls) - 1:
                return


def _frame(value: Any) -> Any:
    try:
        reward, parts = as_score(value)
    except (TypeError, ValueError) as e:
        return {"e": type(e).__name__, "m": str(e), "k": "value"}
    return reward if parts is None else {"v": reward, "p": parts}


def _watch_parent(parent: int) -> None:
    """End this process, and whatever the reward started in its session, soon after the parent is gone (killed
    without closing its pipes: its atexit never ran)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os.killpg(os.getpgrp(), signal.SIGKILL)


def main() -> None:
    parent = os.getppid()
    from essaflow.data.schema import Problem  # noqa: F401 - here, before ready: not inside the reward's deadlines

    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # a reward that reads stdin or prints at the fd level reaches neither pipe nor terminal
        os.dup2(null, fd)
    os.close(null)
    out = _Capture()
    sys.stdin, sys.stdout, sys.stderr = open(os.devnull), out, out  # noqa: SIM115 - for the process's life
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watch").start()
    worker = _Worker(proto_in, proto_out, out)
    worker.send({"ready": os.getpid(), "t": time.monotonic()})
    while (request := worker.recv()) is not None:
        if "load" in request:
            worker.send(worker.load(request["load"]))
        else:
            worker.calls(request)
    os._exit(0)  # not sys.exit: threads the reward started must not keep the process alive
