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
import struct
import threading
from collections.abc import Callable

from services.domain.format.commitlog_format import (
    BLANK_RECORD_SIZE_BYTES,
    HEADERS,
    MAGIC_V1,
    MAGIC_V2,
    PROP_CRC_PREFIX,
    PROP_CRC_RESERVED_LEN,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TOPIC_V1_LENGTH_MAX_BYTES,
    CorruptRecord,
    MessageRecord,
    choose_magic,
    decode_record,
    encode_blank,
    host_from_string,
    tags_code,
)
from services.domain.format.crc32 import crc32 as fast_crc32
from services.domain.format.java_compat import REPEATED_HASHES, java_string_hash_repeated
from services.domain.format.properties_format import (
    INNER_MULTI_DISPATCH,
    INNER_MULTI_QUEUE_OFFSET,
    KEYS,
    LITE_TOPIC,
    TAGS,
    UNIQ_KEY,
    PropertiesError,
    encode_properties_checked,
)
from services.domain.lite import (
    LMQ_OFFSET_DIGITS,
    lite_properties,
    validate_lite_topic,
)
from services.domain.names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, SCHEDULE_TOPIC, is_system_topic
from services.runtime.clock import Clock
from services.store.config import StoreConfig
from services.store.lite.put_offsets import LiteOffsetTable
from services.store.log.mapped_file import MappedFile, MappedFileQueue, WarmAheadService
from services.store.model import DispatchRequest

log = logging.getLogger(__name__)

DISPATCH_BACKLOG_MAX = 262_144  # above this the put path stops recording; reput parses instead
_INT16_PACK = struct.Struct(">h").pack
_HEADER_SIZES = tuple(header.size for header in HEADERS)
_TOPIC_PART_V1_MAX = TOPIC_V1_LENGTH_MAX_BYTES + 1  # one length byte + the topic
_LMQ_OFFSET_NAME = INNER_MULTI_QUEUE_OFFSET.encode() + b"\x01"
_LMQ_OFFSET_FORMAT = b"%0" + str(LMQ_OFFSET_DIGITS).encode() + b"d"


def _with_lmq_offset(properties_bytes: bytes, offset: int) -> bytes:
    """The encoded properties with ``offset`` over the placeholder of INNER_MULTI_QUEUE_OFFSET
    (same length: the record's size does not change). Properties are in Java's HashMap order,
    so the entry is found, not assumed last: at the start, or after a 0x02."""
    at = 0 if properties_bytes.startswith(_LMQ_OFFSET_NAME) else properties_bytes.find(b"\x02" + _LMQ_OFFSET_NAME) + 1
    digits = at + len(_LMQ_OFFSET_NAME)
    return b"%b%b%b" % (
        properties_bytes[:digits],
        _LMQ_OFFSET_FORMAT % offset,
        properties_bytes[digits + LMQ_OFFSET_DIGITS :],
    )


def _lmq_offset(props: dict[str, str]) -> int:
    try:
        return int(props.get(INNER_MULTI_QUEUE_OFFSET, "-1")) if INNER_MULTI_DISPATCH in props else -1
    except ValueError:
        return -1


def _prepare_lite(rec: MessageRecord) -> None:
    """A lite message (``__LITE_TOPIC``) gets its LMQ and an offset placeholder (written over
    under the put lock: ``_with_lmq_offset``); a copy of one in a retry, dead-letter or system topic is no lite message (the properties it
    carries over must not index it into the LMQ again). Raises ValueError for a bad name."""
    props = rec.properties
    lite = props.get(LITE_TOPIC)
    topic = rec.topic
    if lite is not None and not topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)) and not is_system_topic(topic):
        reason = validate_lite_topic(lite)
        if reason is not None:
            raise ValueError(reason)
        lite_properties(props, topic, lite)
    else:
        props.pop(INNER_MULTI_DISPATCH, None)
        props.pop(INNER_MULTI_QUEUE_OFFSET, None)


class CommitLog:
    def __init__(self, config: StoreConfig, clock: Clock, lite_put_offsets: LiteOffsetTable) -> None:
        self.config = config
        self.clock = clock
        self.mfq = MappedFileQueue(
            config.commitlog_dir, config.commitlog_file_size_bytes, warm=config.warm_mapped_files
        )
        # The thread that keeps the last segment populated ahead of the writer (None: off); a
        # store service, started and stopped with the others.
        self.warm_ahead = WarmAheadService(self.mfq, config.warm_ahead_bytes) if config.warm_ahead_bytes > 0 else None
        self.put_lock = threading.Lock()
        # Held by every flush; a truncation (replica_log.py) holds it so no flush runs meanwhile.
        self.flush_lock = threading.RLock()
        self.queue_offset_table: dict[str, int] = {}
        # The lite topics' next offsets, read and moved under the put lock (lite/put_offsets.py).
        self.lite_put_offsets = lite_put_offsets
        self.store_host = host_from_string(config.store_host)
        self.store_host_prefix = self.store_host[0] + struct.pack(">i", self.store_host[1])
        self._store_host_flag = SYSFLAG_STOREHOST_V6 if len(self.store_host[0]) == 16 else 0
        self._topic_parts: dict[str, bytes] = {}
        self.delay_level_millis = config.delay_level_millis
        self.dispatch_backlog: collections.deque[DispatchRequest] = collections.deque()
        self.confirm_offset = 0  # start of the last valid record found at recovery
        self.last_store_timestamp_ms = 0
        self.put_messages_total = 0
        self.put_bytes_total = 0
        # Wakes the warm-ahead thread (None: no thread).
        self.on_populate_low: Callable[[], None] | None = self.warm_ahead.wake if self.warm_ahead is not None else None

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
    def prepare_batch(self, records: list[MessageRecord]) -> list[tuple[MessageRecord, bytes, bytes]]:
        """Everything about each record that does not depend on its place in the log (done
        outside the put lock): fills store_host, body_crc, sys_flag host bits, magic and
        total_size.

        Returns one (record, topic part = length prefix + UTF-8 topic, properties bytes without
        the length prefix and without the CRC trailer's 20 bytes) per record. Raises
        PropertiesError, with ``index`` set to the record's position, for a property name or
        value that cannot be encoded.
        """
        topic_parts = self._topic_parts
        store_host = self.store_host
        host_flag = self._store_host_flag
        prop_extra = PROP_CRC_RESERVED_LEN if self.config.append_prop_crc else 0
        header_sizes = _HEADER_SIZES
        crc32 = fast_crc32
        encode = encode_properties_checked
        prepared: list[tuple[MessageRecord, bytes, bytes]] = []
        add = prepared.append
        for rec in records:
            topic_part = topic_parts.get(rec.topic)
            if topic_part is None:
                topic_part = self._topic_part(rec.topic)
            try:
                if LITE_TOPIC in rec.properties or INNER_MULTI_DISPATCH in rec.properties:
                    try:
                        _prepare_lite(rec)
                    except ValueError as exc:
                        raise PropertiesError(str(exc)) from None
                properties_bytes = encode(rec.properties)
            except PropertiesError as exc:
                exc.index = len(prepared)
                raise
            body = rec.body
            sys_flag = rec.sys_flag & ~0x30 | host_flag
            if len(rec.born_host[0]) == 16:
                sys_flag |= SYSFLAG_BORNHOST_V6
            rec.sys_flag = sys_flag
            rec.store_host = store_host
            rec.body_crc = crc32(body) & 0x7FFFFFFF if body else 0
            rec.magic = MAGIC_V2 if len(topic_part) > _TOPIC_PART_V1_MAX else MAGIC_V1
            rec.total_size = (
                header_sizes[(sys_flag >> 4) & 3] + len(body) + len(topic_part) + 2 + len(properties_bytes) + prop_extra
            )
            add((rec, topic_part, properties_bytes))
        return prepared

    def _topic_part(self, topic: str) -> bytes:
        topic_bytes = topic.encode("utf-8")
        magic = choose_magic(topic_bytes)
        prefix = struct.pack(">h", len(topic_bytes)) if magic == MAGIC_V2 else bytes((len(topic_bytes),))
        return self._topic_parts.setdefault(topic, prefix + topic_bytes)

    def append_batch(self, records: list[tuple[MessageRecord, bytes, bytes]]) -> None:
        """Append prepared records (see :meth:`prepare_batch`) under one lock acquisition.

        Fills queue_offset, phy_offset and store_timestamp_ms of each record. Raises OSError
        if the segment cannot be created or written (nothing after the failure is written).
        """
        file_size = self.config.commitlog_file_size_bytes
        backlog = self.dispatch_backlog
        record_backlog = len(backlog) < DISPATCH_BACKLOG_MAX
        prop_crc = self.config.append_prop_crc
        prop_extra = PROP_CRC_RESERVED_LEN if prop_crc else 0
        store_ip, store_port = self.store_host
        join = b"".join
        crc32 = fast_crc32
        pack_len = _INT16_PACK
        new_request = tuple.__new__
        known_hash = REPEATED_HASHES.get
        lite_put_offsets = self.lite_put_offsets
        with self.put_lock:
            now = self.clock.now_ms()
            if now < self.last_store_timestamp_ms:
                now = self.last_store_timestamp_ms  # store time never goes backwards
            table = self.queue_offset_table
            mf = self.mfq.last_file_for_append()
            mf.check_writable()
            mm = mf.mm
            pos = mf.wrote_position
            base = mf.file_from_offset
            put_bytes = 0
            try:
                for rec, topic_part, properties_bytes in records:
                    topic = rec.topic
                    queue_id = rec.queue_id
                    sys_flag = rec.sys_flag
                    key = f"{topic}-{queue_id}"
                    counted = sys_flag & 0xC in (0x0, 0x8)
                    queue_offset = table.get(key, 0) if counted else 0
                    size = rec.total_size
                    if size + BLANK_RECORD_SIZE_BYTES > file_size - pos:
                        mf.wrote_position = pos
                        mf = self._close_segment_locked(mf, pos)
                        mm = mf.mm
                        pos = 0
                        base = mf.file_from_offset
                    end = pos + size
                    if end > mf.populated_position:
                        mf.populate_ahead(end)
                    phy_offset = base + pos
                    body = rec.body
                    lmq = rec.properties.get(INNER_MULTI_DISPATCH, "")
                    if lmq:
                        lmq_offset = lite_put_offsets.next_offset(lmq)
                        properties_bytes = _with_lmq_offset(properties_bytes, lmq_offset)
                    else:
                        lmq_offset = -1
                    born_ip, born_port = rec.born_host
                    data = join(
                        (
                            HEADERS[(sys_flag >> 4) & 3].pack(
                                size,
                                rec.magic,
                                rec.body_crc,
                                queue_id,
                                rec.flag,
                                queue_offset,
                                phy_offset,
                                sys_flag,
                                rec.born_timestamp_ms,
                                born_ip,
                                born_port,
                                now,
                                store_ip,
                                store_port,
                                rec.reconsume_times,
                                rec.prepared_transaction_offset,
                                len(body),
                            ),
                            body,
                            topic_part,
                            pack_len(len(properties_bytes) + prop_extra),
                            properties_bytes,
                        )
                    )
                    try:
                        if prop_crc:
                            mm[end - PROP_CRC_RESERVED_LEN : end] = b"%b%b\x02" % (
                                PROP_CRC_PREFIX,
                                (b"%d" % (crc32(data) & 0x7FFFFFFF))[::-1].ljust(10, b"0"),
                            )
                        mm[pos : end - prop_extra] = data  # IndexError if the sizes disagree
                    except (OSError, ValueError, TypeError, IndexError) as exc:
                        mf.write_error = exc if isinstance(exc, OSError) else OSError(str(exc))
                        raise mf.write_error  # noqa: B904 - the stored error is what every later write raises
                    pos = end
                    rec.queue_offset = queue_offset
                    rec.phy_offset = phy_offset
                    rec.store_timestamp_ms = now
                    if counted:
                        table[key] = queue_offset + 1
                    if lmq:
                        lite_put_offsets.appended(lmq, lmq_offset, end + base)
                        rec.properties[INNER_MULTI_QUEUE_OFFSET] = str(lmq_offset)
                    if record_backlog:
                        props = rec.properties
                        if topic == SCHEDULE_TOPIC:
                            code = tags_code(rec, self.delay_level_millis)
                        else:
                            tags = props.get(TAGS)
                            if tags:
                                memo = known_hash(tags)  # the memo first: no call
                                code = memo if memo is not None else java_string_hash_repeated(tags)
                            else:
                                code = 0
                        backlog.append(
                            new_request(
                                DispatchRequest,
                                (
                                    topic,
                                    queue_id,
                                    phy_offset,
                                    size,
                                    code,
                                    now,
                                    queue_offset,
                                    props.get(KEYS, ""),
                                    props.get(UNIQ_KEY, ""),
                                    sys_flag,
                                    rec.prepared_transaction_offset,
                                    lmq,
                                    lmq_offset,
                                ),
                            )
                        )
                    put_bytes += size
            finally:
                if pos > mf.wrote_position:
                    mf.wrote_position = pos  # what was written, even when a later record failed
            # Every record in a segment is followed by at least a blank record's bytes of it.
            assert file_size - pos >= BLANK_RECORD_SIZE_BYTES, (mf.file_from_offset, pos)
            if pos > mf.warm_mark and self.on_populate_low is not None:
                mf.warm_mark = file_size  # once per warming round: the warmer sets the next mark
                self.on_populate_low()
            self.put_bytes_total += put_bytes
            self.put_messages_total += len(records)
            self.last_store_timestamp_ms = now

    def _close_segment_locked(self, mf: MappedFile, pos: int) -> MappedFile:
        """Write the blank record at ``pos``, mark the segment full, return the next one."""
        left = self.config.commitlog_file_size_bytes - pos
        assert left >= BLANK_RECORD_SIZE_BYTES, left
        mf.mm[pos : pos + BLANK_RECORD_SIZE_BYTES] = encode_blank(left)
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
            return mf.mm[pos : pos + size]
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
        if isinstance(rec, str) or rec.phy_offset != phy_offset:  # a str: BLANK, a segment's end
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
            rec = decode_record(
                mf.mm, pos, mf.wrote_position, check_crc=False, base_offset=mf.file_from_offset, read_body=False
            )
        except CorruptRecord as exc:
            return None, exc.size
        if isinstance(rec, str):  # BLANK: the segment's end
            return None, 0
        props = rec.properties
        return DispatchRequest(
            rec.topic,
            rec.queue_id,
            phy_offset,
            rec.total_size,
            tags_code(rec, self.delay_level_millis),
            rec.store_timestamp_ms,
            rec.queue_offset,
            props.get(KEYS, ""),
            props.get(UNIQ_KEY, ""),
            rec.sys_flag,
            rec.prepared_transaction_offset,
            props.get(INNER_MULTI_DISPATCH, ""),
            _lmq_offset(props),
        ), rec.total_size

    def store_timestamp_at(self, phy_offset: int) -> int:
        rec = self.read_record(phy_offset)
        return rec.store_timestamp_ms if rec is not None else -1

    # -- flush and lifecycle ------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        with self.flush_lock:
            return self.mfq.flush(least_pages)

    def close(self) -> None:
        self.mfq.close()
