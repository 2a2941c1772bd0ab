"""Reads of the FileStore: by queue offset, by phy offset or offset msg id, by key, by time.

``StoreReader`` reads a CommitLog through its ConsumeQueues and IndexFiles; FileStore is one
(it passes its parts to ``StoreReader.__init__``), so a read costs no extra call.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from services.domain.format.commitlog_format import MessageRecord, decode_offset_msg_id
from services.domain.statuses import GetStatus
from services.store.index.service import IndexService
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.model import GetResult

FILTER_SCAN_UNITS_MAX = 16_000  # units examined per call when a tag filter skips most of them


class ReadableQueue(Protocol):
    """What a read takes of a queue: a ConsumeQueue, or a lite topic's view (lite/queue.py)."""

    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    def get_units(self, queue_offset: int, max_count: int) -> np.ndarray: ...
    def get_unit(self, queue_offset: int) -> tuple[int, int, int] | None: ...


class StoreReader:
    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, index_service: IndexService | None) -> None:
        self._commitlog = commitlog
        self._cq_store = cq_store
        self._index_service = index_service  # None: message_index_enable is off

    def find_queue(self, topic: str, queue_id: int) -> ReadableQueue | None:
        """The queue to read (None: it holds nothing yet); FileStore adds the lite topics."""
        return self._cq_store.find(topic, queue_id)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4 << 20,
        tags_codes: frozenset[int] | None = None,
    ) -> GetResult:
        """Up to ``max_count`` records of a queue from ``queue_offset`` (RocketMQ's getMessage)."""
        cq = self.find_queue(topic, queue_id)
        # RocketMQ creates a missing ConsumeQueue on lookup, so an unknown queue reads as empty.
        min_offset, max_offset = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
        if max_offset == 0 or cq is None:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, next_begin_offset=0, min_offset=0, max_offset=0)
        if queue_offset < min_offset:
            return GetResult(
                GetStatus.OFFSET_TOO_SMALL, next_begin_offset=min_offset, min_offset=min_offset, max_offset=max_offset
            )
        if queue_offset == max_offset:
            return GetResult(
                GetStatus.OFFSET_OVERFLOW_ONE,
                next_begin_offset=queue_offset,
                min_offset=min_offset,
                max_offset=max_offset,
            )
        if queue_offset > max_offset:
            return GetResult(
                GetStatus.OFFSET_OVERFLOW_BADLY,
                next_begin_offset=max_offset,
                min_offset=min_offset,
                max_offset=max_offset,
            )
        max_count = max(1, max_count)
        scan = max_count if tags_codes is None else max(max_count, FILTER_SCAN_UNITS_MAX)
        raw: list[bytes] = []
        total_bytes = 0
        offset = queue_offset
        removed = False
        read_bytes = self._commitlog.read_bytes
        while offset < max_offset and len(raw) < max_count and offset - queue_offset < scan:
            units = cq.get_units(offset, min(scan - (offset - queue_offset), max_offset - offset))
            if not len(units):
                break
            stop = False
            for phy_offset, size, code in units.tolist():
                if tags_codes is not None and code not in tags_codes:
                    offset += 1
                    continue
                if raw and total_bytes + size > max_bytes:
                    stop = True
                    break
                data = read_bytes(phy_offset, size)
                if data is None:
                    removed = True  # the CommitLog segment is gone: skip the unit
                    offset += 1
                    continue
                raw.append(data)
                total_bytes += size
                offset += 1
                if len(raw) >= max_count:
                    stop = True
                    break
            if stop:
                break
        if raw:
            status = GetStatus.FOUND
        else:
            status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, raw, next_begin_offset=offset, min_offset=min_offset, max_offset=max_offset)

    def look_message_by_phy_offset(self, phy_offset: int) -> MessageRecord | None:
        return self._commitlog.read_record(phy_offset)

    def look_message_by_offset_msg_id(self, msg_id: str) -> MessageRecord | None:
        """Raises ValueError for a malformed id."""
        _, phy_offset = decode_offset_msg_id(msg_id)
        return self._commitlog.read_record(phy_offset)

    def query_messages_by_key(
        self, topic: str, key: str, max_num: int, begin_timestamp_ms: int, end_timestamp_ms: int
    ) -> list[MessageRecord]:
        """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS equals ``key``."""
        if self._index_service is None:
            return []
        phy_offsets = self._index_service.query(topic, key, max_num, begin_timestamp_ms, end_timestamp_ms)
        found = []
        for phy_offset in dict.fromkeys(phy_offsets):  # re-dispatch after a restart may index twice
            rec = self._commitlog.read_record(phy_offset)
            if rec is not None and rec.topic == topic and (rec.uniq_key == key or key in rec.keys):
                found.append(rec)
        return found

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``
        (min offset if all are later, max offset if none is)."""
        cq = self.find_queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.get_unit(mid)
            stamp = self._commitlog.store_timestamp_at(unit[0]) if unit is not None else -1
            if stamp < 0:  # removed meanwhile: look later
                lo = mid + 1
            elif stamp < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo
