"""What the scheduler needs from the store (no gRPC here).

``rpc/store_client.py`` implements ``SchedulerStore`` over the store's gRPC API; the tests
implement it in memory. Every method raises ``StoreUnavailableError`` when the store cannot
be reached or fails the call; the loops then back off and retry with their state unchanged.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from services.scheduler.model import GetResult, OutgoingMessage, PutOutcome, StoredRecord


class SchedulerStore(Protocol):
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetResult:
        """Up to ``max_count`` records of a queue from ``queue_offset`` (a pull)."""

    def look_messages(self, refs: list[tuple[int, int]]) -> dict[int, StoredRecord]:
        """The records at these (CommitLog offset, size) pairs, by offset; absent ones (or
        bytes that are not that record) are left out."""

    def put_messages(self, messages: list[OutgoingMessage]) -> list[PutOutcome]:
        """One PutMessages with allow_system_topics: one outcome per message, in order."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets; (0, 0) for a queue that never held a message."""

    def get_delay_offset(self, level: int) -> int:
        """The next SCHEDULE_TOPIC_XXXX queue offset to deliver for a level (0 if none)."""

    def update_delay_offset(self, level: int, offset: int) -> None: ...


# Follows the store's arrival announcements for some topics until ``stopped``:
# ``on_arrival(topic)`` per announced arrival, ``on_restart()`` after each (re)connect.
ArrivalWatch = Callable[[list[str], Callable[[str], None], Callable[[], None], threading.Event], None]
