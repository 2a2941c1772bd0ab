"""The delay levels of delay-level messages (RocketMQ's ``messageDelayLevel``).

A message with DELAY property N (1-based) waits the Nth duration. The store, the scheduler and
the Spark pipeline must read the same table, so the default and its parser live here.
"""

from __future__ import annotations

DELAY_LEVELS_DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 1m"`` -> (1000, 5000, 60000); level N is index N-1."""
    return tuple(int(item[:-1]) * _UNIT_MS[item[-1]] for item in text.split())
