"""Results and requests of the store core (no gRPC here).

Statuses (``services.domain.statuses``) are enums named as RocketMQ names them
(PutMessageStatus, GetMessageStatus): expected outcomes are values, not exceptions, on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from services.domain.format.commitlog_format import MessageRecord, decode_record, offset_msg_id_with_prefix
from services.domain.statuses import GetStatus, PutStatus


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    phy_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    store_timestamp_ms: int = 0
    error: str = ""
    store_host_prefix: bytes = b""  # store IP + int32 port: the offset msg id's first bytes

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def offset_msg_id(self) -> str:
        """Offset message id (store host + phy offset), computed on demand."""
        if self.phy_offset < 0 or not self.store_host_prefix:
            return ""
        return offset_msg_id_with_prefix(self.store_host_prefix, self.phy_offset)


@dataclass(slots=True)
class GetResult:
    """Messages are kept as raw CommitLog records; ``messages`` decodes them on each access."""

    status: GetStatus
    raw_messages: list[bytes] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0

    @property
    def messages(self) -> list[MessageRecord]:
        return [decode_message(raw) for raw in self.raw_messages]


def decode_message(raw: bytes, read_body: bool = True, check_crc: bool = False) -> MessageRecord:
    """The record of ``raw``, one whole message as a read returns it (by default the CRC is not
    checked again: it was when the message was stored or recovered). Never a blank record: reads
    return messages only."""
    record = decode_record(raw, 0, len(raw), check_crc=check_crc, read_body=read_body)
    assert isinstance(record, MessageRecord), "a read returned a blank record"
    return record


class DispatchRequest(NamedTuple):
    """What reput hands to each dispatcher for one CommitLog record (a tuple: cheap to build
    on the put path, one per message)."""

    topic: str
    queue_id: int
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp_ms: int
    queue_offset: int
    keys: str  # raw KEYS property ("" if none), space separated
    uniq_key: str  # UNIQ_KEY ("" if none)
    sys_flag: int
    prepared_transaction_offset: int
    lmq: str = ""  # INNER_MULTI_DISPATCH: the lite topic's LMQ it is also indexed in ("" if none)
    lmq_offset: int = -1  # INNER_MULTI_QUEUE_OFFSET: its offset there


@dataclass(frozen=True, slots=True)
class Arrival:
    """Announced to listeners after dispatch: new messages are readable in a queue."""

    topic: str
    queue_id: int
    max_offset: int  # next queue offset (exclusive end)
    store_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    put_messages_total: int
    put_bytes_total: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    flushed_offset: int
    confirm_offset: int
    reput_from_offset: int
    dispatch_behind_bytes: int
    flush_behind_bytes: int
    storage_size_bytes: int
    topic_count: int
    group_count: int
    flush_mode: str
    lite_topic_count: int = 0
