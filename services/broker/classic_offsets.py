"""Commit offsets that classic pulls carry, kept in memory and written to the store in rounds, as
RocketMQ's ``ConsumerOffsetManager`` keeps them (``flushConsumerOffsetInterval``, 5 s).

A push consumer sends its committed offset in every PULL_MESSAGE (the COMMIT_OFFSET bit) and again
with UPDATE_CONSUMER_OFFSET every 5 s. Writing each pull's through to the store cost a store call
per pull, about a third of a pull's CPU (bench/RESULTS.md); here a pull's commit only replaces the
queue's entry, and ``run_once`` (the remoting door's housekeeping, every ``FLUSH_INTERVAL_S``)
writes the entries changed since. QUERY_CONSUMER_OFFSET reads an entry not written yet first, so
a client never reads an offset older than one it committed here; a reset through the remoting door
(INVOKE_BROKER_TO_RESET_OFFSET) replaces the entries it resets.

What it costs, the same as on RocketMQ: the store (and so v2 GetOffset, ``pyrmq consumer
progress``, other brokers) sees a pull's commit up to 5 s late, and a broker killed in between
loses up to 5 s of commits (those messages are delivered again); a reset made elsewhere (``pyrmq
consumer reset``, another broker) may be overwritten by a commit made before it and written after
(RocketMQ's consumers overwrite resets the same way unless told, RESET_CONSUMER_CLIENT_OFFSET). A
failed write keeps its entries for the next round. ``LOCKING.md``: ``ClassicOffsets._lock``, a leaf (store calls are
made outside it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from services.broker.errors import FAILURES, as_broker_error

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 5.0
Key = tuple[str, str, str, int]  # broker group, consumer group, topic, queue id


class OffsetWriter(Protocol):
    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


class ClassicOffsets:
    def __init__(self, writer_of: Callable[[str], OffsetWriter]) -> None:
        """``writer_of(broker group)``: that group's store client."""
        self._writer_of = writer_of
        self._lock = threading.Lock()
        self._offsets: dict[Key, int] = {}
        self._dirty: set[Key] = set()

    def commit(self, broker_group: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (broker_group, group, topic, queue_id)
        with self._lock:
            self._offsets[key] = offset
            self._dirty.add(key)

    def stored(self, broker_group: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An offset written to the store by another path (UPDATE_CONSUMER_OFFSET): the table
        follows it and has nothing left to write for the queue."""
        key = (broker_group, group, topic, queue_id)
        with self._lock:
            self._offsets[key] = offset
            self._dirty.discard(key)

    def get(self, broker_group: str, group: str, topic: str, queue_id: int) -> int | None:
        """The queue's commit not written to the store yet (None: the store's is current)."""
        key = (broker_group, group, topic, queue_id)
        with self._lock:
            return self._offsets[key] if key in self._dirty else None

    def run_once(self) -> int:
        """Write every entry changed since the last round; how many were written."""
        with self._lock:
            pending = [(key, self._offsets[key]) for key in self._dirty]
        written = 0
        for key, offset in pending:
            broker_group, group, topic, queue_id = key
            try:
                self._writer_of(broker_group).commit_consumer_offset(group, topic, queue_id, offset)
            except FAILURES as exc:  # kept for the next round
                message = as_broker_error(exc).message
                log.warning("offset of %s %s/%d not written yet: %s", group, topic, queue_id, message)
                continue
            written += 1
            with self._lock:
                if self._offsets.get(key) == offset:  # no newer commit came meanwhile
                    self._dirty.discard(key)
        return written
