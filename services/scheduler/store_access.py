"""The store calls the scheduler makes (a narrow protocol over the store client,
``services.store.client``; no gRPC here).

Every call raises ``StoreError`` when the store cannot be reached or fails it; the loops then
back off and retry with their state unchanged.

``put_each_refused`` is how the scheduler delivers a batch: a put is all or nothing, so a batch
the store refused as a whole because of one message (a destination topic that does not exist,
a bad queue id ...) is put again message by message, and only that message is refused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from services.store.client.model import GetOutcome, MessageToPut, PutOutcome, StoredMessage, refused_as_a_whole

log = logging.getLogger(__name__)


class SchedulerStore(Protocol):
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetOutcome:
        """Up to ``max_count`` records of a queue from ``queue_offset`` (a pull)."""

    def look_messages(self, refs: Sequence[tuple[int, int]]) -> dict[int, StoredMessage]:
        """The records at these (CommitLog offset, size) pairs, by offset; absent ones (or
        bytes that are not that record) are left out."""

    def put_messages(self, messages: Sequence[MessageToPut], allow_system_topics: bool = False) -> list[PutOutcome]:
        """One PutMessages (the scheduler's always allow system topics): an outcome per message."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets; (0, 0) for a queue that never held a message."""

    def get_delay_offset(self, level: int) -> int:
        """The next SCHEDULE_TOPIC_XXXX queue offset to deliver for a level (0 if none)."""

    def update_delay_offset(self, level: int, offset: int) -> None: ...


class ArrivalWatch(Protocol):
    """The store's arrival announcements (the store client)."""

    def watch_arrivals(
        self,
        topics: Sequence[str],
        on_arrivals: Callable[[list[str]], None],
        on_restart: Callable[[], None],
        stopped: threading.Event,
    ) -> None:
        """Follow the announcements for ``topics`` on this thread until ``stopped`` or
        ``stop_watching``: ``on_arrivals(topics)`` per batch, ``on_restart()`` after each
        (re)connect."""

    def stop_watching(self) -> None: ...


def put_each_refused(store: SchedulerStore, messages: Sequence[MessageToPut]) -> list[PutOutcome]:
    """Put ``messages`` (system topics allowed) in one PutMessages; if the store refused the
    batch as a whole for one message's content (``BATCH_REFUSAL_STATUSES``), put each alone, in
    order, so only the culprit is refused (as the broker's put coalescer). An outcome per
    message. ``StoreError`` as ``put_messages``: some messages may have landed before it."""
    outcomes = store.put_messages(messages, allow_system_topics=True)
    if len(messages) < 2 or not refused_as_a_whole(outcomes):
        return outcomes
    log.warning(
        "store refused a batch of %d as a whole (%s: %s); putting each alone",
        len(messages),
        outcomes[0].status.name,
        outcomes[0].error,
    )
    return [store.put_messages([message], allow_system_topics=True)[0] for message in messages]
