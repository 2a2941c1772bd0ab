"""MemoryStore: the in-memory reference model of FileStore's read/write contract.

It is the oracle of the model tests (``tests/store/test_model.py``): plain dicts and lists,
no files, no threads, nothing clever. It keeps FileStore's observable behaviour:

* ``put_messages`` validates a batch exactly as FileStore does (all or nothing, the first bad
  message decides the status of every result) and assigns, per record, its phy_offset (with
  segment roll-over: a record of size L at position pos of a segment of size S goes to the
  next segment when ``L + 8 > S - pos``, the 8 bytes being the blank record), its queue offset
  (counted per (topic, queue_id) for transaction types NOT and COMMIT only; PREPARED and
  ROLLBACK records get 0) and its store timestamp (never going backwards).
* records are kept as the very bytes the CommitLog holds (``encode_record`` with the same
  ``prop_crc`` setting), so reads return byte-equal raw records;
* ``get_messages`` follows RocketMQ's getMessage statuses and next_begin_offset rules as
  ``store_read.StoreReader`` implements them.

Nothing is ever deleted (no retention), so a queue's min offset is always 0. Dispatch is
synchronous: a put is readable as soon as put_messages returns.

Invariants: ``records`` is in phy_offset order; ``queues[(topic, queue_id)][n]`` is the
phy_offset of the record with queue offset n; ``max_phy_offset`` is the next append position.
"""

from __future__ import annotations

from services.domain.format.commitlog_format import (
    BLANK_RECORD_SIZE_BYTES,
    PROPERTIES_SIZE_MAX_BYTES,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    MessageRecord,
    decode_offset_msg_id,
    encode_record,
    host_from_string,
    prepare,
    tags_code,
)
from services.domain.format.properties_format import KEY_SEPARATOR, KEYS, PropertiesError, check_properties
from services.domain.names import is_system_topic, validate_topic_name
from services.domain.statuses import GetStatus, PutStatus
from services.runtime.clock import Clock, SystemClock
from services.store.config import StoreConfig
from services.store.model import GetResult, PutResult, decode_message

FILTER_SCAN_UNITS_MAX = 16_000  # as store_read: units examined per call with a tag filter
QUERY_MAX_NUM = 64  # as IndexService: index entries returned per key query


class MemoryConsumerOffsets:
    """Committed consume offsets, ``topic@group`` -> queue id -> next offset to consume.

    ``persist()`` takes the snapshot a crash (``MemoryStore.halt``) falls back to, as FileStore
    loses offsets committed after its last write of consumerOffset.json.
    """

    def __init__(self) -> None:
        self.table: dict[str, dict[int, int]] = {}
        self.persisted: dict[str, dict[int, int]] = {}

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offset_table(self) -> dict[str, dict[int, int]]:
        return {key: dict(queues) for key, queues in self.table.items()}

    def persist(self) -> None:
        self.persisted = self.offset_table()


class MemoryStore:
    def __init__(self, config: StoreConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.store_host = host_from_string(config.store_host)
        self.running = False
        self.topics: dict[str, int] = {}  # topic -> write queue count
        self.raw_by_phy_offset: dict[int, bytes] = {}  # the CommitLog, record by record
        self.records: list[MessageRecord] = []  # decoded, in phy_offset order
        self.queues: dict[tuple[str, int], list[int]] = {}  # queue -> phy_offset per queue offset
        self.max_phy_offset = 0
        self.last_store_timestamp_ms = 0
        self.consumer_offsets = MemoryConsumerOffsets()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.running = True

    def shutdown(self) -> None:
        """A clean stop: everything is kept, consumer offsets included."""
        if self.running:
            self.consumer_offsets.persist()
        self.running = False

    def halt(self) -> None:
        """A crash with the page cache kept: records survive, unpersisted offsets do not."""
        self.running = False
        self.consumer_offsets.table = {k: dict(v) for k, v in self.consumer_offsets.persisted.items()}

    # -- writes -----------------------------------------------------------------------------
    def put_messages(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> list[PutResult]:
        if not self.running:
            return [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="store is not running") for _ in messages]
        prepared = []
        for rec in messages:
            rec = _copy(rec)
            rec.store_host = self.store_host
            status, error = self._check(rec, allow_system_topics)
            if status is not None:
                return [PutResult(status, error=error) for _ in messages]
            prepared.append(rec)
        now = max(self.clock.now_ms(), self.last_store_timestamp_ms)
        self.last_store_timestamp_ms = now
        results = []
        for rec in prepared:
            counted = rec.sys_flag & SYSFLAG_TRANSACTION_MASK in (0x0, 0x8)
            queue = self.queues.setdefault((rec.topic, rec.queue_id), []) if counted else None
            rec.queue_offset = len(queue) if queue is not None else 0
            rec.store_timestamp_ms = now
            rec.phy_offset = self._append_position(rec.total_size)
            raw = encode_record(rec, prop_crc=self.config.append_prop_crc)
            assert len(raw) == rec.total_size
            self.raw_by_phy_offset[rec.phy_offset] = raw
            self.records.append(decode_message(raw, check_crc=True))
            if queue is not None:
                queue.append(rec.phy_offset)
            self.max_phy_offset = rec.phy_offset + rec.total_size
            results.append(
                PutResult(
                    PutStatus.PUT_OK,
                    rec.phy_offset,
                    rec.total_size,
                    rec.queue_offset,
                    now,
                    "",
                    rec.store_host[0] + rec.store_host[1].to_bytes(4, "big"),
                )
            )
        return results

    def _append_position(self, size: int) -> int:
        """Where a record of ``size`` bytes lands: here, or at the next segment's start when it
        does not fit with 8 bytes to spare (the blank record fills the rest of the segment)."""
        file_size = self.config.commitlog_file_size_bytes
        pos = self.max_phy_offset % file_size
        if size + BLANK_RECORD_SIZE_BYTES > file_size - pos:
            return self.max_phy_offset + file_size - pos
        return self.max_phy_offset

    def _check(self, rec: MessageRecord, allow_system_topics: bool) -> tuple[PutStatus | None, str]:
        """FileStore's checks, in FileStore's order; fills the record's derived fields."""
        if validate_topic_name(rec.topic):
            return PutStatus.TOPIC_ILLEGAL, "illegal topic"
        if rec.body is None or len(rec.body) > self.config.body_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, "body missing or too large"
        if rec.queue_id < 0:
            return PutStatus.QUEUE_ID_ILLEGAL, "negative queue id"
        try:
            check_properties(rec.properties)
        except PropertiesError as exc:
            return PutStatus.MESSAGE_ILLEGAL, str(exc)
        if is_system_topic(rec.topic):
            if not allow_system_topics:
                return PutStatus.TOPIC_ILLEGAL, "system topic"
        else:
            if rec.topic not in self.topics:
                if not self.config.auto_create_topic_enable:
                    return PutStatus.TOPIC_NOT_FOUND, "unknown topic"
                self.topics[rec.topic] = self.config.default_topic_queue_nums
            if rec.queue_id >= self.topics[rec.topic]:
                return PutStatus.QUEUE_ID_ILLEGAL, "queue id out of range"
        _, properties_bytes = prepare(rec, prop_crc=self.config.append_prop_crc)
        if len(properties_bytes) > PROPERTIES_SIZE_MAX_BYTES:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED, "properties too large"
        if rec.total_size > self.config.record_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, "record too large"
        if rec.total_size + BLANK_RECORD_SIZE_BYTES > self.config.commitlog_file_size_bytes:
            return PutStatus.MESSAGE_ILLEGAL, "record does not fit a segment"
        return None, ""

    # -- reads by queue offset ----------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4 << 20,
        tags_codes: frozenset[int] | None = None,
    ) -> GetResult:
        queue = self.queues.get((topic, queue_id), [])
        min_offset, max_offset = 0, len(queue)
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, next_begin_offset=0)
        if queue_offset < min_offset:
            status, next_offset = GetStatus.OFFSET_TOO_SMALL, min_offset
        elif queue_offset == max_offset:
            status, next_offset = GetStatus.OFFSET_OVERFLOW_ONE, queue_offset
        elif queue_offset > max_offset:
            status, next_offset = GetStatus.OFFSET_OVERFLOW_BADLY, max_offset
        else:
            status = None
        if status is not None:
            return GetResult(status, next_begin_offset=next_offset, min_offset=min_offset, max_offset=max_offset)
        max_count = max(1, max_count)
        scan_end = queue_offset + (max_count if tags_codes is None else max(max_count, FILTER_SCAN_UNITS_MAX))
        raw: list[bytes] = []
        total_bytes = 0
        offset = queue_offset
        while offset < min(max_offset, scan_end) and len(raw) < max_count:
            data = self.raw_by_phy_offset[queue[offset]]
            if tags_codes is not None and self._tags_code(queue[offset]) not in tags_codes:
                offset += 1
                continue
            if raw and total_bytes + len(data) > max_bytes:
                break
            raw.append(data)
            total_bytes += len(data)
            offset += 1
        status = GetStatus.FOUND if raw else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, raw, next_begin_offset=offset, min_offset=min_offset, max_offset=max_offset)

    def _tags_code(self, phy_offset: int) -> int:
        raw = self.raw_by_phy_offset[phy_offset]
        return tags_code(decode_message(raw, check_crc=True), self.config.delay_level_millis)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (max offset if none)."""
        queue = self.queues.get((topic, queue_id), [])
        for offset, phy_offset in enumerate(queue):
            if self._record(phy_offset).store_timestamp_ms >= timestamp_ms:
                return offset
        return len(queue)

    # -- reads by phy offset and by key -------------------------------------------------------
    def look_message_by_phy_offset(self, phy_offset: int) -> MessageRecord | None:
        raw = self.raw_by_phy_offset.get(phy_offset)
        return decode_message(raw, check_crc=True) if raw is not None else None

    def _record(self, phy_offset: int) -> MessageRecord:
        """The record at ``phy_offset``, which a queue or the key index names (it is there)."""
        return decode_message(self.raw_by_phy_offset[phy_offset], check_crc=True)

    def look_message_by_offset_msg_id(self, msg_id: str) -> MessageRecord | None:
        """Raises ValueError for a malformed id."""
        _, phy_offset = decode_offset_msg_id(msg_id)
        return self.look_message_by_phy_offset(phy_offset)

    def query_messages_by_key(
        self, topic: str, key: str, max_num: int, begin_timestamp_ms: int, end_timestamp_ms: int
    ) -> list[MessageRecord]:
        """Newest first. Like the IndexFile, a record counts once per index entry it has for
        ``key`` (UNIQ_KEY, then each KEYS word) towards ``min(max_num, 64)`` before the
        duplicates are dropped; ROLLBACK records are not indexed. The time window applies to
        exact store times: the IndexFile keeps whole seconds since its first entry, so the two
        agree on windows only for whole-second store times in an IndexFile that never rolled."""
        entries: list[int] = []
        for rec in reversed(self.records):
            if (
                rec.topic != topic
                or rec.transaction_type == SYSFLAG_TRANSACTION_ROLLBACK_TYPE
                or not begin_timestamp_ms <= rec.store_timestamp_ms <= end_timestamp_ms
            ):
                continue
            indexed = [rec.uniq_key or ""] + rec.properties.get(KEYS, "").split(KEY_SEPARATOR)
            entries += [rec.phy_offset] * sum(1 for k in indexed if k and k == key)
        entries = entries[: max(0, min(max_num, QUERY_MAX_NUM))]
        return [self._record(phy_offset) for phy_offset in dict.fromkeys(entries)]


def _copy(rec: MessageRecord) -> MessageRecord:
    """A copy to fill in (FileStore fills the caller's records; the model leaves them alone)."""
    return MessageRecord(
        topic=rec.topic,
        queue_id=rec.queue_id,
        body=rec.body,
        properties=dict(rec.properties),
        flag=rec.flag,
        sys_flag=rec.sys_flag,
        born_timestamp_ms=rec.born_timestamp_ms,
        born_host=rec.born_host,
        store_host=rec.store_host,
        reconsume_times=rec.reconsume_times,
        prepared_transaction_offset=rec.prepared_transaction_offset,
    )
