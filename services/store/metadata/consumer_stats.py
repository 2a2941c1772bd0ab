"""Per (consumer group, topic) consumption figures: lag, in-flight, ready and dead-lettered messages.

* ``lag_messages``: over the queues the group has committed on, the messages at or above its
  committed offset (``max_offset - max(committed, min_offset)``), as RocketMQ 5's
  ``rocketmq_consumer_lag_messages``: in-flight messages are part of the lag;
* ``inflight_messages``: deliveries popped and not yet acked or expired (the pop service's
  memory; 0 after a store restart until the group pops again);
* ``ready_messages``: over the same queues, the messages no pop has handed out yet: from the
  pop's read position (its lowest cursor; the committed offset when the queue was not popped
  since the store started) to the max offset, plus FIFO messages expired and waiting to be
  delivered again. RocketMQ 5's ``rocketmq_consumer_ready_messages`` (ConsumerLagCalculator's
  available count: max offset - pull offset). Filtered-out messages count until a pop reads
  past them, as in RocketMQ without ``estimateAccumulation``;
* ``dlq_messages``: messages moved to ``%DLQ%{group}`` since the store started (revive after the
  last attempt, or ForwardMessageToDeadLetterQueue), by the topic consumed.

The group's retry topic of each topic, ``%RETRY%{group}_{topic}`` (and a legacy shared
``%RETRY%{group}`` from before issue 15), appears as its own topic, as RocketMQ's
ConsumerLagCalculator reports a pop retry topic apart. No gRPC here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from services.store.metadata.consumer_offsets import TOPIC_GROUP_SEPARATOR, ConsumerOffsetManager
from services.store.pop.service import PopService


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    group: str
    topic: str
    lag_messages: int
    inflight_messages: int
    ready_messages: int = 0
    dlq_messages: int = 0


class ConsumptionSource(Protocol):
    """What the figures are read from (a FileStore)."""

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...
    @property
    def pop(self) -> PopService: ...
    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...


def consumer_stats(store: ConsumptionSource, group: str = "") -> list[ConsumerStats]:
    """Every (group, topic) with committed offsets, messages in flight or dead-lettered, sorted;
    ``group`` limits it to one group."""
    lag: dict[tuple[str, str], int] = {}
    ready: dict[tuple[str, str], int] = {}
    progress = store.pop.pop_progress()
    for key, queues in store.consumer_offsets.offset_table().items():
        topic, _, owner = key.rpartition(TOPIC_GROUP_SEPARATOR)
        if not topic or (group and owner != group):
            continue
        behind = not_read = 0
        for queue_id, committed in queues.items():
            max_offset = store.max_offset_in_queue(topic, queue_id)
            min_offset = store.min_offset_in_queue(topic, queue_id)
            behind += max(0, max_offset - max(committed, min_offset))
            read_from, to_redeliver = progress.get((owner, topic, queue_id), (committed, 0))
            not_read += max(0, max_offset - max(read_from, min_offset)) + to_redeliver
        lag[(owner, topic)] = behind
        ready[(owner, topic)] = not_read
    in_flight = {k: v for k, v in store.pop.in_flight_counts().items() if not group or k[0] == group}
    dead = {k: v for k, v in store.pop.revive.dead_lettered_counts().items() if not group or k[0] == group}
    return [
        ConsumerStats(g, t, lag.get((g, t), 0), in_flight.get((g, t), 0), ready.get((g, t), 0), dead.get((g, t), 0))
        for g, t in sorted(lag.keys() | in_flight.keys() | dead.keys())
    ]
