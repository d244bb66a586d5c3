"""How many draws a built-in task's generator makes for its distinct problems, and when it stops early.

A generator draws at random and keeps each new problem; knobs that hold fewer distinct problems than it is asked for
(Countdown's six numbers in [1, 2], a target cap of 1) would spend every draw of the budget finding ever fewer new
ones: half a minute before the error. The draws stop as soon as even twice the rate of new problems over the last
window cannot reach the number asked for within the draws left; the rate of new problems only falls as they run out,
so a task that can make them is not stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

PER_PROBLEM = 200
"""Draws allowed per problem asked for."""
WINDOW = 20_000
"""Draws between two looks at the rate of new problems."""


def draws(wanted: int, found: Callable[[], int], per_problem: int = PER_PROBLEM) -> Iterator[int]:
    """Draw numbers 0, 1, ... up to `wanted` * `per_problem`, ending early when `found()` (the distinct problems so
    far) is out of reach of `wanted` at twice its recent rate; the generator raises when it has too few."""
    budget = wanted * per_problem
    at_last_look = 0
    for attempt in range(budget):
        if attempt and attempt % WINDOW == 0:
            now = found()
            if now + 2 * (now - at_last_look) * (budget - attempt) / WINDOW < wanted:
                return
            at_last_look = now
        yield attempt
