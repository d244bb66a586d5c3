"""Stage timing: a stage's wall time split into compute, storage and tracking (reported in Ref.timings)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Timer:
    """Splits a stage's wall time into named parts (compute, storage, tracking).

    Parts nest: storage written from inside a trainer's callback counts as storage, not as compute.
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._parts: dict[str, float] = defaultdict(float)
        self._stack: list[str] = []

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        self._stack.append(name)
        try:
            yield
        finally:
            self._stack.pop()
            elapsed = time.perf_counter() - t0
            self._parts[name] += elapsed
            if self._stack:
                self._parts[self._stack[-1]] -= elapsed

    def timings(self) -> dict[str, float]:
        out = {k: round(v, 3) for k, v in self._parts.items()}
        out["total"] = round(time.perf_counter() - self._start, 3)
        return out
