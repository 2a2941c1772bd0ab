"""Waiting in tests: ``wait_until``, the one way a test waits for something to happen.

A test never sleeps a fixed time to let something happen (a thread dispatch, a watch, a child's
restart): it waits on the condition, so it goes on the moment the condition holds and fails,
saying what it waited for, when it does not hold in time. The remaining ``time.sleep`` calls in
tests pace a loop or let a real clock pass (a lease TTL, a kill after a random delay), each with a
comment saying why."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_PAUSE_S = 0.002  # the first re-check comes soon: most conditions hold within milliseconds
PAUSE_MAX_S = 0.05  # then pauses double up to this, so a long wait does not spin the 2 CPUs


def wait_until(
    condition: Callable[[], T],
    timeout_s: float = 10.0,
    what: str = "",
    describe: Callable[[], object] | None = None,
    accept: Callable[[T], object] | None = None,
    pause_max_s: float = PAUSE_MAX_S,
) -> T:
    """Call ``condition`` until it returns a true value, and return that value; with ``accept``,
    until ``accept(value)`` is true (the value returned may then be false: an empty list).
    AssertionError naming ``what`` and the state seen (``describe()``, else the last value) once
    ``timeout_s`` passed without it. The condition is always called once more at the deadline."""
    deadline = time.monotonic() + timeout_s
    pause_s = FIRST_PAUSE_S
    while True:
        last = time.monotonic() >= deadline
        value = condition()
        if accept(value) if accept is not None else value:
            return value
        if last:
            seen = describe() if describe is not None else value
            raise AssertionError(f"not reached in {timeout_s:g} s: {what or condition}; seen: {seen!r}"[:4000])
        time.sleep(min(pause_s, max(0.0, deadline - time.monotonic())))
        pause_s = min(2 * pause_s, pause_max_s)
