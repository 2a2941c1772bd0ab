"""Time source of the transaction checker: the store's ``Clock`` (style rule 10).

The checker reads time only through an injected ``Clock``; this module re-exports the store's
``SystemClock`` (production) and ``ManualClock`` (tests) so txcheck code never imports ``time``.
"""
from __future__ import annotations

from services.store.clock import Clock, ManualClock, SystemClock

__all__ = ["Clock", "ManualClock", "SystemClock"]
