"""Time source of the scheduler: the store's ``Clock`` (style rule 10).

Every timer decision reads time through an injected ``Clock``: ``SystemClock`` in production,
``ManualClock`` in tests, which run hours of timers by moving it by hand.
"""
from __future__ import annotations

from services.store.clock import Clock, ManualClock, SystemClock

__all__ = ["Clock", "ManualClock", "SystemClock"]
