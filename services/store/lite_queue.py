"""A lite topic read as a queue: the few ConsumeQueue calls the readers make (``min_offset``,
``max_offset``, ``get_units``, ``get_unit``) over the lite index, so ``get_messages``, the pop
engine and where a new group starts treat ``%LMQ%$parent$lite`` queue 0 like any queue."""

from __future__ import annotations

import numpy as np

from services.domain.format.consume_queue_format import CQ_DTYPE
from services.domain.lite import LMQ_QUEUE_ID
from services.store.lite_index import LiteIndex, LiteQueue


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
        return tuple(units[0].tolist()) if len(units) else None  # type: ignore[return-value]


def find_lite_queue(index: LiteIndex, lmq: str, queue_id: int) -> LiteQueueView | None:
    """The view of lite topic ``lmq`` (queue 0: a lite topic has one), None if it holds nothing."""
    if queue_id != LMQ_QUEUE_ID or not index.is_open:
        return None
    queue = index.queue(lmq)
    return LiteQueueView(index, queue) if queue is not None else None
