"""Timer metrics file ``config/timermetrics``: RocketMQ 5's ``TimerMetrics`` JSON (one line).

| field | JSON type | meaning |
|---|---|---|
| ``dataVersion.counter`` | number | pyrmq: the ``config/timercheck`` counter of the checkpoint the counts belong to |
| ``dataVersion.stateVersion`` | number | 0 |
| ``dataVersion.timestamp`` | number | ms since the epoch when the file was written |
| ``timingCount.<topic>.count`` | number | timer messages of that real topic (``REAL_TOPIC``) waiting in the wheel |
| ``timingCount.<topic>.timeStamp`` | number | ms since the epoch when that count last changed |

dataVersion(3 numbers) + timingCount(one object of 2 numbers per topic): the whole document.
RocketMQ writes it with fastjson (``TimerMetricsSerializeWrapper``, ``BrowserCompatible``):
compact, bean fields in alphabetical order (``dataVersion`` before ``timingCount``; ``count``
before ``timeStamp``), non-ASCII escaped as ``\\uXXXX``. The ``timingCount`` map is a Java
``ConcurrentHashMap`` whose order RocketMQ does not rely on; pyrmq writes topics sorted.
RocketMQ reads the file with ``TimerMetricsSerializeWrapper.fromJson`` and keeps only
``timingCount`` and ``dataVersion``, so the two files are interchangeable; RocketMQ's own
``dataVersion.counter`` counts metric updates instead, which pyrmq's loader treats as "not
this checkpoint's" (it rebuilds the counts: services/scheduler/timing_counts.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TimingCount:
    count: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TimerMetricsDocument:
    counter: int
    timestamp_ms: int
    timing_count: dict[str, TimingCount] = field(default_factory=dict)
    state_version: int = 0


def encode_timer_metrics(document: TimerMetricsDocument) -> str:
    """The document as RocketMQ writes it (compact JSON, fields alphabetical, ASCII only)."""
    body = {
        "dataVersion": {
            "counter": document.counter,
            "stateVersion": document.state_version,
            "timestamp": document.timestamp_ms,
        },
        "timingCount": {
            topic: {"count": entry.count, "timeStamp": entry.timestamp_ms}
            for topic, entry in sorted(document.timing_count.items())
        },
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object")
    return value


def decode_timer_metrics(text: str) -> TimerMetricsDocument:
    """Parse a ``timermetrics`` file; ValueError if it is not one."""
    root = _object(json.loads(text), "timermetrics")
    version = _object(root.get("dataVersion", {}), "dataVersion")
    counts = {}
    for topic, entry in _object(root.get("timingCount", {}), "timingCount").items():
        entry = _object(entry, f"timingCount.{topic}")
        counts[topic] = TimingCount(
            _int(entry.get("count", 0), f"timingCount.{topic}.count"),
            _int(entry.get("timeStamp", 0), f"timingCount.{topic}.timeStamp"),
        )
    return TimerMetricsDocument(
        counter=_int(version.get("counter", 0), "dataVersion.counter"),
        timestamp_ms=_int(version.get("timestamp", 0), "dataVersion.timestamp"),
        timing_count=counts,
        state_version=_int(version.get("stateVersion", 0), "dataVersion.stateVersion"),
    )
