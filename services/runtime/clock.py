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
