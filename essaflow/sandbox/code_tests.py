"""The code_tests reward's side of the sandbox: the program a completion holds, run with a problem's tests, scored
1.0 when it runs to its end and exits 0, else 0.0; the process-wide pools that run them, and the verdicts already
reached (a snippet's verdict is a function of its bytes and the sandbox's limits)."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence

from essaflow.sandbox.config import SandboxConfig
from essaflow.sandbox.pool import SandboxPool

# a fenced block: its info string (the language) and its body; the closing fence may be missing (a truncated answer)
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON = {"python", "py", "python3"}
_POOLS: dict[str, SandboxPool] = {}
_MEMOS: dict[str, VerdictMemo] = {}
_POOLS_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_POOLS.clear)  # a forked child starts its own pool, never uses its parent's


def extract_program(completion: str) -> str:
    """The code in a completion: the first ```python block, else the first fenced block, else all of it."""
    blocks = _FENCE.findall(completion)
    for info, body in blocks:
        if info.strip().lower() in _PYTHON:
            return body
    return blocks[0][1] if blocks else completion


def code_tests_scores(
    completions: Sequence[str],
    tests: Sequence[str],
    pool: SandboxPool,
    memo: VerdictMemo | None = None,
    preludes: Sequence[str] | None = None,
) -> list[float]:
    """1.0 for each completion whose program, followed by its tests (Python that raises when the program is
    wrong: asserts, or a check function and its call), runs to its end and exits 0 in the sandbox; else 0.0.
    `preludes`: code run before each program (HumanEval's prompt: its imports and helpers).
    With `memo`, a snippet already judged (the same bytes) is not run again, nor twice within the batch."""
    if len(completions) != len(tests):
        raise ValueError(f"{len(completions)} completions but {len(tests)} tests")
    preludes = preludes or [""] * len(completions)
    snippets = [snippet_of(c, t, pre) for c, t, pre in zip(completions, tests, preludes)]
    memo = memo or VerdictMemo(0)
    known = {s: v for s in set(snippets) if (v := memo.get(s)) is not None}
    new = list(dict.fromkeys(s for s in snippets if s not in known))  # each distinct snippet once, in order
    for snippet, outcome in zip(new, pool.run(new)):
        known[snippet] = outcome.ok
        memo.put(snippet, outcome.ok)
    return [1.0 if known[s] else 0.0 for s in snippets]


def snippet_of(completion: str, tests: str, prelude: str = "") -> str:
    """What the sandbox runs for a completion: its prelude, its program, then its tests."""
    return (prelude + "\n" if prelude else "") + extract_program(completion) + "\n" + tests


def syntax_problem(code: str) -> str | None:
    """Why `code` is no Python ("SyntaxError, line 3: invalid syntax"), found by compiling it, never running it;
    None when it compiles."""
    try:
        compile(code, "<code>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{type(e).__name__}, line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:  # a null byte; nesting past the parser's depth
        return f"{type(e).__name__}: {str(e)[:160]}"
    return None


def why_not_passed(completion: str, tests: str, prelude: str, pool: SandboxPool) -> tuple[str, str]:
    """(kind, words): why a completion (a reference answer, in check-config) does not pass its tests, naming what
    is at fault. kind: "tests" (the tests are no Python), "program" (the program and prelude are none), or what the
    sandbox saw when it ran them: "timeout" (past eval.sandbox.timeout_s or cpu_s), "failed" (its last line of
    output: the exception), "crashed", "error" (its worker was lost); "passed" when it passes after all."""
    wrong = syntax_problem(tests)
    if wrong:
        return "tests", f"its tests are no Python ({wrong})"
    snippet = snippet_of(completion, tests, prelude)
    wrong = syntax_problem(snippet)
    if wrong:
        return "program", f"its program is no Python ({wrong})"
    outcome = pool.run([snippet])[0]
    cfg = pool.cfg
    if outcome.status == "timeout":
        return "timeout", (f"it ran past the sandbox's limits (eval.sandbox.timeout_s={cfg.timeout_s:g} s, "
                           f"eval.sandbox.cpu_s={cfg.cpu_s})")  # fmt: skip
    last = next((line.strip() for line in reversed(outcome.output.splitlines()) if line.strip()), "")
    said = f": {last[:160]}" if last else ""
    words = {"passed": "it passes when run alone", "crashed": "it crashed", "error": "the sandbox lost it"}
    return outcome.status, words.get(outcome.status, "it failed") + ("" if outcome.ok else said)


class VerdictMemo:
    """Up to `size` verdicts by snippet digest (sha256 of its bytes), least recently used dropped first;
    thread-safe. size 0 remembers nothing."""

    def __init__(self, size: int):
        self.size = size
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        """Snippets answered from memory (for benches and tests)."""

    def get(self, snippet: str) -> bool | None:
        key = hashlib.sha256(snippet.encode()).digest()
        with self._lock:
            verdict = self._verdicts.get(key)
            if verdict is not None:
                self._verdicts.move_to_end(key)
                self.hits += 1
            return verdict

    def put(self, snippet: str, ok: bool) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._verdicts[hashlib.sha256(snippet.encode()).digest()] = ok
            while len(self._verdicts) > self.size:
                self._verdicts.popitem(last=False)


def shared_pool(cfg: SandboxConfig | None = None) -> SandboxPool:
    """The process's pool for cfg (one per distinct config, started on first use, closed at exit)."""
    cfg = cfg or SandboxConfig()
    key = cfg.model_dump_json()
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.closed:
            pool = _POOLS[key] = SandboxPool(cfg)
        return pool


def shared_memo(cfg: SandboxConfig | None = None) -> VerdictMemo:
    """The process's verdicts for cfg: a verdict holds for the limits it ran under, so each config has its own."""
    cfg = cfg or SandboxConfig()
    key = cfg.model_dump_json()
    with _POOLS_LOCK:
        memo = _MEMOS.get(key)
        if memo is None:
            memo = _MEMOS[key] = VerdictMemo(cfg.memo_size)
        return memo
