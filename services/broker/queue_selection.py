"""Which write queue a send goes to. The server picks; the client's choice is ignored.

Clients cannot be trusted to pick (Node always sends queue 0, Py sends none: docs/v2-clients.md,
pitfall 6), so, like the RocketMQ 5 proxy's ``SendMessageQueueSelector``:

* FIFO (a message group): ``Hashing.consistentHash(group.hashCode(), write_queue_nums)``,
  Guava's jump consistent hash of Java's ``String.hashCode``. The same group always lands in
  the same queue (what per-queue ordered consumption needs), a change of the queue count
  moves as few groups as possible, and the queue is the one a Java proxy would pick.
* otherwise round-robin over the write queues, one counter per topic.

The hash lives with the routes (services/domain/routes.py), where a send over several broker
groups picks among all of their queues the same way.
"""

from __future__ import annotations

import itertools
import threading

from services.domain.routes import guava_consistent_hash, message_group_bucket

__all__ = ["RoundRobin", "fifo_queue_id", "guava_consistent_hash"]


def fifo_queue_id(message_group: str, write_queue_nums: int) -> int:
    return message_group_bucket(message_group, write_queue_nums)


class RoundRobin:
    """A per-topic counter; ``next_queue_id`` is safe to call from any thread."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def next_queue_id(self, topic: str, write_queue_nums: int) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(topic, itertools.count())
        return next(counter) % write_queue_nums  # next() on itertools.count is atomic under the GIL
