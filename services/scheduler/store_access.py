"""The store calls the scheduler makes (a narrow protocol over the store client,
``services.store.client``; no gRPC here).

Every call raises ``StoreError`` when the store cannot be reached or fails it; the loops then
back off and retry with their state unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from services.store.client.model import GetOutcome, PutOutcome, StoredMessage, StoreMessage


class SchedulerStore(Protocol):
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetOutcome:
        """Up to ``max_count`` records of a queue from ``queue_offset`` (a pull)."""

    def look_messages(self, refs: Sequence[tuple[int, int]]) -> dict[int, StoredMessage]:
        """The records at these (CommitLog offset, size) pairs, by offset; absent ones (or
        bytes that are not that record) are left out."""

    def put_messages(self, messages: Sequence[StoreMessage], allow_system_topics: bool = False) -> list[PutOutcome]:
        """One PutMessages (the scheduler's always allow system topics): an outcome per message."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets; (0, 0) for a queue that never held a message."""

    def get_delay_offset(self, level: int) -> int:
        """The next SCHEDULE_TOPIC_XXXX queue offset to deliver for a level (0 if none)."""

    def update_delay_offset(self, level: int, offset: int) -> None: ...


# Follows the store's arrival announcements for some topics until the event is set (the store
# client's ``watch_arrivals``): ``on_arrivals(topics)`` per batch, ``on_restart()`` after each
# (re)connect.
ArrivalWatch = Callable[[Sequence[str], Callable[[list[str]], None], Callable[[], None], threading.Event], None]
