"""Time source. The only module of the store that reads the wall clock or sleeps on it."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic_s(self) -> float: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()


class SteadyClock:
    """The wall clock in milliseconds, kept at the monotonic clock's pace: a step of the system
    clock larger than ``step_ms`` (a jump, an NTP step, a VM restored) is taken in gradually, at
    most ``slew_ratio`` of the time elapsed, and the clock never goes back. Smaller differences
    (drift, NTP's own slewing) are followed at once. What it is for: deadlines measured on the
    wall clock because they must hold across hosts (a timer message's delivery time, a pop's
    invisible time that a new master carries on) neither fire early when this host's clock jumps
    forward nor stall when it jumps back (found by the netns faults: a +30 s jump on the master
    expired every receipt in flight at once). The services run on it (``store``, ``scheduler``)."""

    def __init__(self, base: Clock | None = None, step_ms: int = 500, slew_ratio: float = 0.05) -> None:
        self._base = base or SystemClock()
        self._step_ms = step_ms
        self._slew_ratio = slew_ratio
        self._lock = threading.Lock()
        self._mono = self._base.monotonic_s()
        self._now = float(self._base.now_ms())

    def now_ms(self) -> int:
        with self._lock:
            mono, wall = self._base.monotonic_s(), self._base.now_ms()
            elapsed_ms = max(0.0, (mono - self._mono) * 1000.0)
            projected = self._now + elapsed_ms
            gap = wall - projected
            if abs(gap) > self._step_ms:
                most = self._slew_ratio * elapsed_ms
                gap = max(-most, min(most, gap))
            self._now, self._mono = max(self._now, projected + gap), mono
            return int(self._now)

    def monotonic_s(self) -> float:
        return self._base.monotonic_s()


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_s(self) -> float:
        return self._now_ms / 1000.0

    def advance_ms(self, delta_ms: int) -> None:
        with self._lock:
            self._now_ms += delta_ms

    def set_ms(self, now_ms: int) -> None:
        self._now_ms = now_ms
