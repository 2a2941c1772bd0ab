"""CommitLog: the append-only record log every other store file is derived from.

Records are appended under one put lock per batch; the lock assigns, for each record, its
phy_offset (global byte position), its queue_offset (next unit of its ConsumeQueue, for
transaction types NOT and COMMIT only) and its store timestamp. A record that does not fit
in the current segment with 8 bytes to spare is preceded by a blank record that fills the
segment, and goes to the next segment.

Invariants:
- ``min_offset <= flushed_where <= max_offset`` (max_offset = next append position);
- every record in a segment is followed by at least 8 bytes of that segment;
- ``queue_offset_table["topic-qid"]`` is the next queue offset of that queue.

The put path also leaves a DispatchRequest for each record in ``dispatch_backlog``, so the
reput service need not parse what was just encoded; reput parses the log whenever the
backlog does not start exactly at its reput_from_offset (after a restart, or an overflow).
"""
from __future__ import annotations

import collections
import logging
import threading

from services.store.clock import Clock
from services.store.config import StoreConfig
from services.store.format.commitlog_format import (
    BLANK, BLANK_RECORD_SIZE_BYTES, SCHEDULE_TOPIC, SYSFLAG_TRANSACTION_MASK, CorruptRecord,
    MessageRecord, decode_record, encode_blank, encode_into, fill_prop_crc, host_from_string, tags_code)
from services.store.format.java_compat import java_string_hash
from services.store.format.properties_format import KEYS, TAGS, UNIQ_KEY
from services.store.mapped_file import MappedFile, MappedFileQueue
from services.store.model import DispatchRequest

log = logging.getLogger(__name__)

DISPATCH_BACKLOG_MAX = 262_144  # above this the put path stops recording; reput parses instead


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}-{queue_id}"


def dispatches(sys_flag: int) -> bool:
    """Only transaction types NOT (0) and COMMIT (0x8) get a ConsumeQueue unit."""
    return sys_flag & SYSFLAG_TRANSACTION_MASK in (0x0, 0x8)


class CommitLog:
    def __init__(self, config: StoreConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.mfq = MappedFileQueue(config.commitlog_dir, config.commitlog_file_size_bytes,
                                   warm=config.warm_mapped_files)
        self.put_lock = threading.Lock()
        self.queue_offset_table: dict[str, int] = {}
        self.store_host = host_from_string(config.store_host)
        self.delay_level_millis = config.delay_level_millis
        self.dispatch_backlog: collections.deque[DispatchRequest] = collections.deque()
        self.confirm_offset = 0      # start of the last valid record found at recovery
        self.last_store_timestamp_ms = 0
        self.put_messages_total = 0
        self.put_bytes_total = 0

    # -- offsets ----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.mfq.min_offset

    @property
    def max_offset(self) -> int:
        return self.mfq.max_offset

    @property
    def flushed_where(self) -> int:
        return self.mfq.flushed_where

    def roll_next_file(self, offset: int) -> int:
        size = self.config.commitlog_file_size_bytes
        return offset + size - offset % size

    # -- append -----------------------------------------------------------------------------
    def append_batch(self, records: list[tuple[MessageRecord, bytes, bytes]]) -> None:
        """Append prepared records (see commitlog_format.prepare) under one lock acquisition.

        Fills queue_offset, phy_offset and store_timestamp_ms of each record. Raises OSError
        if the segment cannot be created or written (nothing after the failure is written).
        """
        file_size = self.config.commitlog_file_size_bytes
        backlog = self.dispatch_backlog
        record_backlog = len(backlog) < DISPATCH_BACKLOG_MAX
        with self.put_lock:
            now = self.clock.now_ms()
            if now < self.last_store_timestamp_ms:
                now = self.last_store_timestamp_ms  # store time never goes backwards
            table = self.queue_offset_table
            prop_crc = self.config.append_prop_crc
            mf = self.mfq.last_file_for_append()
            mf.check_writable()
            for rec, topic_bytes, properties_bytes in records:
                key = f"{rec.topic}-{rec.queue_id}"
                counted = dispatches(rec.sys_flag)
                rec.queue_offset = table.get(key, 0) if counted else 0
                rec.store_timestamp_ms = now
                size = rec.total_size
                pos = mf.wrote_position
                if size + BLANK_RECORD_SIZE_BYTES > file_size - pos:
                    mf = self._close_segment_locked(mf, pos)
                    pos = 0
                rec.phy_offset = mf.file_from_offset + pos
                try:
                    encode_into(mf.mm, pos, rec, topic_bytes, properties_bytes)
                    if prop_crc:
                        fill_prop_crc(mf.mm, pos, size)
                except (OSError, ValueError) as exc:
                    mf.write_error = exc if isinstance(exc, OSError) else OSError(str(exc))
                    raise mf.write_error
                mf.wrote_position = pos + size
                if counted:
                    table[key] = rec.queue_offset + 1
                if record_backlog:
                    props = rec.properties
                    tags = props.get(TAGS)
                    if rec.topic == SCHEDULE_TOPIC:
                        code = tags_code(rec, self.delay_level_millis)
                    else:
                        code = java_string_hash(tags) if tags else 0
                    backlog.append(DispatchRequest(
                        rec.topic, rec.queue_id, rec.phy_offset, size, code, now, rec.queue_offset,
                        props.get(KEYS, ""), props.get(UNIQ_KEY, ""), rec.sys_flag,
                        rec.prepared_transaction_offset))
                self.put_bytes_total += size
            self.put_messages_total += len(records)
            self.last_store_timestamp_ms = now

    def _close_segment_locked(self, mf: MappedFile, pos: int) -> MappedFile:
        """Write the blank record at ``pos``, mark the segment full, return the next one."""
        left = self.config.commitlog_file_size_bytes - pos
        assert left >= BLANK_RECORD_SIZE_BYTES, left
        mf.mm[pos:pos + BLANK_RECORD_SIZE_BYTES] = encode_blank(left)
        mf.wrote_position = self.config.commitlog_file_size_bytes
        nxt = self.mfq.create_file(mf.file_end_offset)
        nxt.check_writable()
        return nxt

    # -- read -------------------------------------------------------------------------------
    def read_bytes(self, phy_offset: int, size: int) -> bytes | None:
        """The ``size`` bytes at ``phy_offset``, or None when not (or no longer) in the log."""
        if phy_offset < 0 or phy_offset + size > self.max_offset:
            return None
        mf = self.mfq.find_by_offset(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.file_from_offset
        try:
            return mf.mm[pos:pos + size]
        except (ValueError, TypeError):  # mapping closed by retention meanwhile
            return None

    def read_record(self, phy_offset: int, check_crc: bool = False) -> MessageRecord | None:
        """Decode the record at ``phy_offset`` (None if absent, blank or corrupt)."""
        mf = self.mfq.find_by_offset(phy_offset)
        if mf is None or phy_offset >= self.max_offset:
            return None
        pos = phy_offset - mf.file_from_offset
        limit = min(mf.wrote_position, self.config.commitlog_file_size_bytes)
        try:
            rec = decode_record(mf.mm, pos, limit, check_crc=check_crc, base_offset=mf.file_from_offset)
        except (CorruptRecord, ValueError, TypeError):
            return None
        if rec is BLANK or rec.phy_offset != phy_offset:
            return None
        return rec

    def dispatch_request_at(self, phy_offset: int) -> tuple[DispatchRequest | None, int]:
        """Parse the record at ``phy_offset`` for reput.

        Returns (request, size): size 0 and request None for a blank record (jump to the next
        file), size -1 when there is no valid record (end of data), size > 0 and request None
        when the record's length arithmetic is wrong (skip it).
        """
        mf = self.mfq.find_by_offset(phy_offset)
        if mf is None:
            return None, -1
        pos = phy_offset - mf.file_from_offset
        try:
            rec = decode_record(mf.mm, pos, mf.wrote_position, check_crc=False,
                                base_offset=mf.file_from_offset, read_body=False)
        except CorruptRecord as exc:
            return None, exc.size
        if rec is BLANK:
            return None, 0
        props = rec.properties
        return DispatchRequest(
            rec.topic, rec.queue_id, phy_offset, rec.total_size, tags_code(rec, self.delay_level_millis),
            rec.store_timestamp_ms, rec.queue_offset, props.get(KEYS, ""), props.get(UNIQ_KEY, ""),
            rec.sys_flag, rec.prepared_transaction_offset), rec.total_size

    def store_timestamp_at(self, phy_offset: int) -> int:
        rec = self.read_record(phy_offset)
        return rec.store_timestamp_ms if rec is not None else -1

    # -- flush and lifecycle ------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        return self.mfq.flush(least_pages)

    def close(self) -> None:
        self.mfq.close()
