"""What `eval.reward` names, and the code behind it by content: a registered name, a file (`path/to/file.py:fn`) or
a module (`package.module:fn`).

A reference resolves to a `RewardRef`: the function's name, the source text of the file that defines it and that
text's SHA-256. The digest is part of the evaluation protocol (a changed reward is a changed protocol: the gate
re-scores the champion, no cache serves an old score), and the source travels to Ray workers by value, so a worker
on another machine runs exactly the bytes the driver digested, without seeing the driver's disk (docs/rewards.md).
"""

from __future__ import annotations

import importlib.util
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from essaflow.judging.reward_worker import define_module, function_error, import_hint
from essaflow.storage.sha256 import sha256_bytes

Kind = Literal["builtin", "file", "module"]


class RewardRefError(ValueError):
    """An `eval.reward` that cannot be used: a missing file or function, a syntax error, a wrong signature."""


@dataclass(frozen=True)
class RewardRef:
    """A resolved `eval.reward`: which function, and the source it is defined by (picklable, a few KB)."""

    ref: str
    """As configured: a registered name, `/abs/path/file.py:fn` or `package.module:fn`."""
    kind: Kind
    function: str
    """The function's name (for a builtin, the registered name)."""
    source: str
    """The defining file's text (a builtin: the function's own source)."""
    origin: str
    """Where the source was read (a path, or `essaflow` for a builtin): named in errors."""

    @property
    def digest(self) -> str:
        """SHA-256 of the source text: what the protocol records."""
        return sha256_bytes(self.source.encode())

    @property
    def package(self) -> str | None:
        """The package a module reward's relative imports resolve against (a package's `__init__`: itself; a
        top-level module: ''); None for a file or a builtin."""
        if self.kind != "module":
            return None
        module = split_ref(self.ref)[1]
        return module if Path(self.origin).name == "__init__.py" else module.rpartition(".")[0]


def split_ref(ref: str) -> tuple[Kind, str, str]:
    """(kind, where, function) of an `eval.reward` string, without reading anything."""
    if ":" not in ref:
        return "builtin", "", ref
    where, _, function = ref.rpartition(":")
    if not where or not function.isidentifier():
        raise RewardRefError(f"eval.reward {ref!r}: expected a registered name, path/to/file.py:function or "
                             "package.module:function")  # fmt: skip
    return ("file" if where.endswith(".py") or "/" in where else "module"), where, function


def absolute_ref(ref: str, base_dir: Path) -> str:
    """`ref` with a relative file path made absolute against `base_dir` (the config file's folder)."""
    kind, where, function = split_ref(ref)
    if kind != "file" or Path(where).is_absolute():
        return ref
    return f"{(base_dir / where).resolve()}:{function}"


def resolve_reward_ref(ref: str) -> RewardRef:
    """Read the source `ref` points at; RewardRefError naming the file or module when it is not there."""
    kind, where, function = split_ref(ref)
    if kind == "builtin":
        from essaflow.judging.rewards import REWARDS

        fn, judged_by = REWARDS.get(ref), REWARDS.meta(ref).get("judged_by")  # what else decides its scores
        source = inspect.getsource(inspect.unwrap(fn)) + (judged_by() if judged_by else "")
        return RewardRef(ref, kind, ref, source, "essaflow")
    path = Path(where) if kind == "file" else _module_file(where, ref)
    try:
        source = path.read_text()
    except FileNotFoundError:
        raise RewardRefError(f"eval.reward {ref!r}: no file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RewardRefError(f"eval.reward {ref!r}: cannot read {path}: {e}") from None
    return RewardRef(ref, kind, function, source, str(path))


def _module_file(module: str, ref: str) -> Path:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise RewardRefError(f"eval.reward {ref!r}: cannot find module {module!r}: {e}") from None
    if spec is None:
        raise RewardRefError(f"eval.reward {ref!r}: no module {module!r} on sys.path")
    if not spec.origin or not spec.origin.endswith(".py"):
        raise RewardRefError(f"eval.reward {ref!r}: no Python source for module {module!r} ({spec.origin or 'none'}:"
                             " built in or compiled); a reward is defined from its source: call it from a function "
                             "of a file of yours")  # fmt: skip
    return Path(spec.origin)


_LOADED: dict[tuple[str, str], Callable[..., Any]] = {}
_LOCK = threading.Lock()


def load_reward_function(ref: RewardRef) -> Callable[..., Any]:
    """The function `ref` names, defined from its shipped source (once per process and digest)."""
    if ref.kind == "builtin":
        from essaflow.judging.rewards import REWARDS

        return REWARDS.get(ref.function)
    key = (ref.digest, ref.function)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _define(ref)
        return _LOADED[key]


def _define(ref: RewardRef) -> Callable[..., Any]:
    try:
        module = define_module(ref.source, ref.origin, ref.digest, ref.package)
    except SyntaxError as e:
        raise RewardRefError(
            f"eval.reward {ref.ref!r}: syntax error in {ref.origin}, line {e.lineno}: {e.msg}"
        ) from None
    except Exception as e:
        hint = import_hint(e, ref.origin, ref.package)
        raise RewardRefError(
            f"eval.reward {ref.ref!r}: importing {ref.origin} raised {type(e).__name__}: {e}{hint}"
        ) from e
    fn = getattr(module, ref.function, None)
    wrong = function_error(fn, module, ref.origin, ref.function)
    if wrong:
        raise RewardRefError(f"eval.reward {ref.ref!r}: {wrong}")
    return fn
