"""Waiting on a condition, not on the clock: a test that needs another thread or process to have done something
polls for the thing itself, with a deadline, instead of sleeping a guessed while."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str = "the condition", every: float = 0.02) -> T:
    """Call `condition` until it returns something true and return that; AssertionError naming `what` once
    `timeout` seconds have passed (the condition is asked one last time at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
