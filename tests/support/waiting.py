"""Waiting on a condition, not on the clock: a test that needs another thread or process to have done something
polls for the thing itself, with a deadline, instead of sleeping a guessed while. The suite's one waiting helper:
no test writes its own deadline loop (`while time.monotonic() < deadline: ... time.sleep(...)`)."""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str] = "the condition",
    every: float = 0.02,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> T:
    """Call `condition` until it returns something true and return that; AssertionError naming `what` and the last
    answer once `timeout` seconds have passed (the condition is asked one last time at the deadline).

    `what`: a string, or a function called at the timeout to say what was awaited and what there is (a log's tail).
    `every`: the seconds between two asks. `retry_on`: exceptions the condition may raise while the thing is not
    there yet (a busy server's 503, a server that is still starting): each counts as a false answer, and the last
    one is named in the timeout's message; any other exception (an assert in the condition) propagates at once."""
    deadline = time.monotonic() + timeout
    got: object = None
    error: BaseException | None = None
    while True:
        try:
            got, error = condition(), None
        except retry_on as e:
            got, error = None, e
        if got:
            return got  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            last = f"last error: {error!r}" if error is not None else f"last answer: {reprlib.repr(got)}"
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said} ({last})") from error
        time.sleep(every)
