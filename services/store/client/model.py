"""The plain types the store client speaks (no gRPC): what goes into a put, what a read, a pop
or a metadata call returns. Field names are the store API's and RocketMQ's (``queue_offset``,
``phy_offset``, ``store_size_bytes``); hosts are ``"ip:port"`` text as the store API carries them.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

from services.domain.format.commitlog_format import CorruptRecord, MessageRecord, decode_record, host_to_string
from services.domain.format.properties_format import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY
from services.domain.retry_policy import GroupRetryPolicy
from services.domain.statuses import GetStatus, PutStatus

__all__ = [
    "AckResult",
    "BATCH_REFUSAL_STATUSES",
    "Delivery",
    "GetOutcome",
    "GetStatus",
    "GroupInfo",
    "PolicyView",
    "PopOutcome",
    "PutOutcome",
    "PutStatus",
    "MessageToPut",
    "StoreStats",
    "StoredMessage",
    "TopicInfo",
    "refused_as_a_whole",
    "stored_from_raw",
]


@dataclass(slots=True)
class MessageToPut:
    """A message to put: the producer-side fields of the store API's ``Message`` (a read answers
    a ``StoredMessage``)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""  # "ip:port" / "[ipv6]:port"; "" = 127.0.0.1:0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    flag: int = 0
    allow_system_topic: bool = False  # a caller's own write to a system topic (timer, half messages)


@dataclass(slots=True)
class StoredMessage:
    """A record read back from the store: every field of the store API's ``Message``."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    queue_offset: int
    phy_offset: int
    sys_flag: int = 0
    flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""
    store_timestamp_ms: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    offset_msg_id: str = ""
    store_size_bytes: int = 0
    body_crc: int = 0

    @property
    def message_id(self) -> str:
        """The client's message id (UNIQ_KEY), "" if the producer set none."""
        return self.properties.get(UNIQ_KEY, "")

    @property
    def tag(self) -> str:
        return self.properties.get(TAGS, "")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(KEYS, "").split(KEY_SEPARATOR) if k]


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """The store's answer for one message of a put."""

    status: PutStatus
    queue_offset: int = -1
    phy_offset: int = -1
    offset_msg_id: str = ""
    error: str = ""
    store_timestamp_ms: int = 0  # written into the record; 0 if not appended

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


# Statuses with which the store refuses a *whole* batch because of one message's content (a put
# is all or nothing): a caller re-puts such a batch message by message so only the culprit fails.
BATCH_REFUSAL_STATUSES = frozenset(
    {
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        PutStatus.TOPIC_ILLEGAL,
        PutStatus.TOPIC_NOT_FOUND,
        PutStatus.QUEUE_ID_ILLEGAL,
        PutStatus.LMQ_QUOTA_EXCEEDED,
    }
)


def refused_as_a_whole(outcomes: list[PutOutcome]) -> bool:
    """Whether a put's outcomes are one refusal of the whole batch for a message's content."""
    if not outcomes:
        return False
    first = outcomes[0]
    return first.status in BATCH_REFUSAL_STATUSES and all(
        o.status is first.status and o.error == first.error for o in outcomes
    )


@dataclass(slots=True)
class GetOutcome:
    """A read by queue offset: ``StoredMessage``s (get_messages) or whole records as bytes
    (get_raw_messages), with RocketMQ's GetMessageStatus and next offset."""

    status: GetStatus
    messages: list[Any]  # list[StoredMessage] (get_messages) | list[bytes] (get_raw_messages)
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class Delivery:
    """One popped (or pulled) message as the store returned it (topic = the original topic)."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    delivery_attempt: int
    receipt_handle: str
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""
    store_timestamp_ms: int = 0
    store_host: str = ""
    offset_msg_id: str = ""


@dataclass(slots=True)
class PopOutcome:
    messages: list[Delivery]
    examined_topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    """How far one consumer group is behind on one topic (the store's GetConsumerStats)."""

    group: str
    topic: str
    lag_messages: int  # at or above the committed offsets (in-flight included)
    inflight_messages: int  # popped, neither acked nor expired
    ready_messages: int  # not handed out yet
    dlq_messages: int  # moved to %DLQ%{group} since the store started


@dataclass(frozen=True, slots=True)
class StoreStats:
    """The store's GetStats counters and CommitLog offsets (counters since the store started)."""

    put_messages_total: int
    put_bytes_total: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    dispatch_behind_bytes: int
    flush_behind_bytes: int
    storage_size_bytes: int


@dataclass(frozen=True, slots=True)
class ConsumerStatsReport:
    """The store's GetConsumerStats: consumer figures by (group, topic), and the open
    transactions (half messages not yet committed, rolled back or discarded) by real topic."""

    consumers: list[ConsumerStats]
    half_messages: dict[str, int]  # real topic -> open transactions (0 once all are resolved)


class AckResult(enum.Enum):
    OK = "OK"
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    DLQ_PUT_FAILED = "DLQ_PUT_FAILED"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """The part of a store ``TopicConfig`` its callers use."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int  # 4 read | 2 write | 1 inherit
    message_type: str  # NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, LITE or MIXED
    attributes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # lite.topic.expiration ...

    @property
    def readable(self) -> bool:
        return bool(self.perm & 4)

    @property
    def writable(self) -> bool:
        return bool(self.perm & 2)


@dataclass(frozen=True, slots=True)
class LiteTopicView:
    """One lite topic of a LITE parent (ListLiteTopics)."""

    lite_topic: str
    min_offset: int
    max_offset: int  # one past the last message
    last_store_timestamp_ms: int
    consumer_offset: int  # the group's; -1: none, or no group asked


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """The part of a store ``SubscriptionGroupConfig`` its callers use."""

    name: str
    consume_message_orderly: bool = False
    retry_max_times: int = 16
    retry_policy: GroupRetryPolicy = GroupRetryPolicy()  # RocketMQ's default: CUSTOMIZED, 1s .. 2h
    attributes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # group_attributes.py


@dataclass(frozen=True)
class PolicyView:
    """One ACL policy of a user: a resource, its actions, Allow or Deny, and source IPs."""

    resource: str
    actions: tuple[str, ...]
    decision: str
    source_ips: tuple[str, ...] = ()


def stored_from_raw(raw: bytes) -> StoredMessage | None:
    """A whole CommitLog record (get_raw_messages, look_raw_messages) as a ``StoredMessage``;
    None if the bytes are not a record (the CRC is not checked: the store checked it)."""
    try:
        record = decode_record(raw, 0, len(raw), check_crc=False)
    except (CorruptRecord, ValueError, TypeError, struct.error):
        return None
    if not isinstance(record, MessageRecord):  # BLANK: the end of a segment
        return None
    return stored_from_record(record)


def stored_from_record(record: MessageRecord) -> StoredMessage:
    """A decoded CommitLog record (``domain.format.commitlog_format.MessageRecord``) as a
    ``StoredMessage``."""
    return StoredMessage(
        topic=record.topic,
        queue_id=record.queue_id,
        body=record.body,
        properties=record.properties,
        queue_offset=record.queue_offset,
        phy_offset=record.phy_offset,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=host_to_string(record.born_host),
        store_timestamp_ms=record.store_timestamp_ms,
        store_host=host_to_string(record.store_host),
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        offset_msg_id=record.offset_msg_id,
        store_size_bytes=record.total_size,
        body_crc=record.body_crc,
    )


def copy_to(record: StoredMessage, topic: str, queue_id: int, properties: dict[str, str]) -> MessageToPut:
    """The record as a new message for ``topic``/``queue_id``: body, flag, sys flag, born time
    and host, reconsume times kept (RocketMQ's messageTimeUp / convertMessage; the scheduler's
    deliveries and the transaction checker's half copies)."""
    return MessageToPut(
        topic=topic,
        queue_id=queue_id,
        body=record.body,
        properties=properties,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times,
    )
