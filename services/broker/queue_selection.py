"""Which write queue a send goes to. The server picks; the client's choice is ignored.

Clients cannot be trusted to pick (Node always sends queue 0, Py sends none: docs/v2-clients.md,
pitfall 6), so, like the RocketMQ 5 proxy's ``SendMessageQueueSelector``:

* FIFO (a message group): ``Hashing.consistentHash(group.hashCode(), write_queue_nums)``,
  Guava's jump consistent hash of Java's ``String.hashCode``. The same group always lands in
  the same queue (what per-queue ordered consumption needs), a change of the queue count
  moves as few groups as possible, and the queue is the one a Java proxy would pick.
* otherwise round-robin over the write queues, one counter per topic.
"""

from __future__ import annotations

import itertools
import threading

from services.domain.format.java_compat import java_string_hash_repeated

_LCG_MULTIPLIER = 2862933555777941757
_U64 = (1 << 64) - 1


def guava_consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``: a bucket in [0, buckets)."""
    assert buckets > 0, "buckets must be positive"
    state = key & _U64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _U64
        # ((int) (state >>> 33) + 1) / 2^31, with Java's int overflow of the "+ 1".
        numerator = (state >> 33) + 1
        if numerator == 1 << 31:
            numerator = -(1 << 31)
        next_double = numerator / 2147483648.0
        following = int((candidate + 1) / next_double)
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


def fifo_queue_id(message_group: str, write_queue_nums: int) -> int:
    return guava_consistent_hash(java_string_hash_repeated(message_group), write_queue_nums)


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
