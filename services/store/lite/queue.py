"""A lite topic read as a queue: the few ConsumeQueue calls the readers make (``min_offset``,
``max_offset``, ``get_units``, ``get_unit``) over the lite index, so ``get_messages``, the pop
engine and where a new group starts treat ``%LMQ%$parent$lite`` queue 0 like any queue; and
``list_lite_topics``, a page of a parent's lite topics with a group's offsets (ListLiteTopics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from services.domain.format.consume_queue_format import CQ_DTYPE
from services.domain.lite import LITE_SEPARATOR, LITE_TOPIC_PREFIX, LMQ_QUEUE_ID
from services.store.lite.index import LiteIndex, LiteQueue


class LiteQueueView:
    def __init__(self, index: LiteIndex, queue: LiteQueue) -> None:
        self._index = index
        self._lmq = queue.lmq
        self.min_offset = queue.min_offset
        self.max_offset = queue.max_offset
        self.last_store_timestamp_ms = queue.last_store_timestamp_ms

    def get_units(self, queue_offset: int, max_count: int) -> np.ndarray:
        """Up to ``max_count`` units from ``queue_offset`` on, as ConsumeQueue units; stops at a
        gap (units removed with their lite topic), as a ConsumeQueue read stops at a file end."""
        units = self._index.units(self._lmq, queue_offset, max_count)
        out = np.empty(len(units), dtype=CQ_DTYPE)
        count = 0
        for unit in units:
            if unit.queue_offset != queue_offset + count:
                break
            out[count] = (unit.phy_offset, unit.size, unit.tags_code)
            count += 1
        return out[:count]

    def get_unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        units = self.get_units(queue_offset, 1)
        return tuple(units[0].tolist()) if len(units) else None


def find_lite_queue(index: LiteIndex, lmq: str, queue_id: int) -> LiteQueueView | None:
    """The view of lite topic ``lmq`` (queue 0: a lite topic has one), None if it holds nothing."""
    if queue_id != LMQ_QUEUE_ID or not index.is_open:
        return None
    queue = index.queue(lmq)
    return LiteQueueView(index, queue) if queue is not None else None


LIST_LITE_TOPICS_MAX = 10_000  # lite topics per page


@dataclass(frozen=True, slots=True)
class LiteTopicRow:
    lite_topic: str
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int
    consumer_offset: int  # the group's (-1: none, or no group asked)


def list_lite_topics(
    index: LiteIndex,
    query_offset: Callable[[str, str, int], int],
    parent: str,
    group: str = "",
    backlog_only: bool = False,
    after: str = "",
    limit: int = LIST_LITE_TOPICS_MAX,
) -> tuple[list[LiteTopicRow], str]:
    """Up to ``limit`` lite topics of ``parent`` after ``after`` in name order, with ``group``'s
    offset in each; ``backlog_only``: those where the group has messages to read (no offset yet
    counts as having them). The second value is the name to continue after ("" at the end).
    ``query_offset(group, topic, queue)``: the consumer offset table's."""
    prefix = LITE_TOPIC_PREFIX + parent + LITE_SEPARATOR
    rows: list[LiteTopicRow] = []
    start = prefix + after if after else prefix
    last = ""
    for queue in index.iter_queues(prefix, start_after=start):
        lite_topic = queue.lmq[len(prefix) :]
        last = lite_topic
        offset = query_offset(group, queue.lmq, LMQ_QUEUE_ID) if group else -1
        if not backlog_only or (offset < queue.max_offset if offset >= 0 else queue.max_offset > queue.min_offset):
            rows.append(
                LiteTopicRow(lite_topic, queue.min_offset, queue.max_offset, queue.last_store_timestamp_ms, offset)
            )
        if len(rows) >= limit:
            return rows, last
    return rows, ""
