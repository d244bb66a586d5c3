"""The code_tests reward's side of the sandbox: the program a completion holds, run with a problem's tests, scored
1.0 when it runs to its end and exits 0, else 0.0; and the process-wide pools that run them."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence

from essaflow.sandbox.config import SandboxConfig
from essaflow.sandbox.pool import SandboxPool

# a fenced block: its info string (the language) and its body; the closing fence may be missing (a truncated answer)
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON = {"python", "py", "python3"}
_POOLS: dict[str, SandboxPool] = {}
_POOLS_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_POOLS.clear)  # a forked child starts its own pool, never uses its parent's


def extract_program(completion: str) -> str:
    """The code in a completion: the first ```python block, else the first fenced block, else all of it."""
    blocks = _FENCE.findall(completion)
    for info, body in blocks:
        if info.strip().lower() in _PYTHON:
            return body
    return blocks[0][1] if blocks else completion


def code_tests_scores(completions: Sequence[str], tests: Sequence[str], pool: SandboxPool) -> list[float]:
    """1.0 for each completion whose program, followed by its tests (Python that raises when the program is
    wrong: asserts, or a check function and its call), runs to its end and exits 0 in the sandbox; else 0.0."""
    if len(completions) != len(tests):
        raise ValueError(f"{len(completions)} completions but {len(tests)} tests")
    snippets = [extract_program(c) + "\n" + t for c, t in zip(completions, tests)]
    return [1.0 if outcome.ok else 0.0 for outcome in pool.run(snippets)]


def shared_pool(cfg: SandboxConfig | None = None) -> SandboxPool:
    """The process's pool for cfg (one per distinct config, started on first use, closed at exit)."""
    cfg = cfg or SandboxConfig()
    key = cfg.model_dump_json()
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.closed:
            pool = _POOLS[key] = SandboxPool(cfg)
        return pool
