"""The scheduler core's data: what it reads from and writes to the store (no gRPC here).

``store_client.SchedulerStore`` is the narrow interface the core uses; ``rpc/store_client.py``
implements it over the store's gRPC API.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class GetStatus(enum.Enum):
    """Mirrors the store's GetStatus (RocketMQ's GetMessageStatus)."""

    FOUND = 1
    NO_MATCHED_MESSAGE = 2
    MESSAGE_WAS_REMOVING = 3
    OFFSET_FOUND_NULL = 4
    OFFSET_OVERFLOW_BADLY = 5
    OFFSET_OVERFLOW_ONE = 6
    OFFSET_TOO_SMALL = 7
    NO_MATCHED_LOGIC_QUEUE = 8
    NO_MESSAGE_IN_QUEUE = 9


class PutStatus(enum.Enum):
    """Mirrors the store's PutStatus (RocketMQ's PutMessageStatus)."""

    PUT_OK = 1
    FLUSH_DISK_TIMEOUT = 2
    SERVICE_NOT_AVAILABLE = 3
    CREATE_MAPPED_FILE_FAILED = 4
    MESSAGE_ILLEGAL = 5
    PROPERTIES_SIZE_EXCEEDED = 6
    TOPIC_ILLEGAL = 7
    TOPIC_NOT_FOUND = 8
    QUEUE_ID_ILLEGAL = 9
    OS_PAGE_CACHE_BUSY = 10
    UNKNOWN_ERROR = 11


# Appended to the CommitLog (FLUSH_DISK_TIMEOUT: appended, not yet on disk): delivered.
APPENDED_STATUSES = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT})
# Retrying cannot help: the message is dropped and counted (TimerMessageStore's PUT_NO_RETRY).
PERMANENT_FAILURES = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                PutStatus.TOPIC_ILLEGAL, PutStatus.TOPIC_NOT_FOUND, PutStatus.QUEUE_ID_ILLEGAL})


@dataclass(slots=True)
class StoredRecord:
    """One CommitLog record as the store returns it."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    queue_offset: int
    phy_offset: int
    store_size_bytes: int
    store_timestamp_ms: int = 0
    sys_flag: int = 0
    flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""
    reconsume_times: int = 0


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    messages: list[StoredRecord] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0


@dataclass(slots=True)
class OutgoingMessage:
    """A message the scheduler puts (always with allow_system_topics)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    sys_flag: int = 0
    flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""
    reconsume_times: int = 0


@dataclass(frozen=True, slots=True)
class PutOutcome:
    status: PutStatus
    phy_offset: int = -1
    queue_offset: int = -1
    error: str = ""


def copy_to(record: StoredRecord, topic: str, queue_id: int, properties: dict[str, str]) -> OutgoingMessage:
    """The record as a new message for ``topic``/``queue_id`` (RocketMQ's messageTimeUp /
    convertMessage: body, flag, sys flag, born time and host, reconsume times kept)."""
    return OutgoingMessage(topic=topic, queue_id=queue_id, body=record.body, properties=properties,
                           sys_flag=record.sys_flag, flag=record.flag, born_timestamp_ms=record.born_timestamp_ms,
                           born_host=record.born_host, reconsume_times=record.reconsume_times)
