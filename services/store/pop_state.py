"""The pop engine's state (``pop.PopService``): per (group, source topic, queue) a ``QueueState``,
and one pop's parameters as a ``PopRequest``. No locking here: PopService's lock guards both."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.domain.sql_filter import SqlFilter
from services.domain.topic_types import priority_scan_order
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


def scan_order(
    topic: str, read_queue_nums: int, retries: list[tuple[str, int]], pop_count: int, by_priority: bool
) -> list[tuple[str, int]]:
    """The queues a pop of every queue takes from, in order: the topic's queues and then its retry
    queues, from a start one further at each pop of the (group, topic); ``by_priority`` (a
    PRIORITY topic): the topic's queues from the highest level down, then the retry queues, so
    redeliveries are the lowest priority (``services/domain/topic_types.py``)."""
    if by_priority:
        return [(topic, q) for q in priority_scan_order(read_queue_nums)] + retries
    queues = [(topic, q) for q in range(read_queue_nums)] + retries
    if not queues:
        return []
    start = pop_count % len(queues)
    return queues[start:] + queues[:start]
