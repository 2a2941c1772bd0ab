"""The pop engine's state (``pop.PopService``): per (group, source topic, queue) a ``QueueState``,
and one pop's parameters as a ``PopRequest``. No locking here: PopService's lock guards both."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.domain.sql_filter import SqlFilter
from services.store.revive import InFlight


@dataclass(slots=True)
class QueueState:
    """``committed <= done / in flight / to redeliver < cursor`` (pop.py's docstring)."""

    committed: int
    seen: int  # consumer_offsets value last read or written
    cursors: dict[str, int] = field(default_factory=dict)  # requested topic -> next offset
    done: set[int] = field(default_factory=set)  # finished offsets > committed
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    redeliver: dict[int, InFlight] = field(default_factory=dict)  # FIFO, expired: deliver again


@dataclass(frozen=True, slots=True)
class PopRequest:
    group: str
    topic: str
    max_count: int
    invisible_ms: int
    tags_codes: frozenset[int] | None
    sql: SqlFilter | None
    fifo: bool
    max_deliveries: int
    now_ms: int
