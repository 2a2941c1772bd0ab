"""The broker core's data: v2 requests as plain dataclasses, and what it asks of the store.

``rpc/convert.py`` builds these from protobuf and back; nothing here imports gRPC. Field
names follow the v2 protocol (``message_group``, ``delivery_timestamp_ms``) on the client side
and RocketMQ's store vocabulary (``queue_offset``, ``phy_offset``) on the store side.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.store.model import PutStatus


class MessageType(enum.IntEnum):
    """``apache.rocketmq.v2.MessageType`` (pair-asserted in rpc/convert.py)."""

    MESSAGE_TYPE_UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


class ClientType(enum.IntEnum):
    """``apache.rocketmq.v2.ClientType``."""

    CLIENT_TYPE_UNSPECIFIED = 0
    PRODUCER = 1
    PUSH_CONSUMER = 2
    SIMPLE_CONSUMER = 3
    PULL_CONSUMER = 4
    LITE_PUSH_CONSUMER = 5
    LITE_SIMPLE_CONSUMER = 6


class BodyEncoding(enum.IntEnum):
    """``apache.rocketmq.v2.Encoding``."""

    ENCODING_UNSPECIFIED = 0
    IDENTITY = 1
    GZIP = 2


@dataclass(slots=True)
class IncomingMessage:
    """One ``Message`` of a SendMessage request, as the client sent it."""

    topic: str
    body: bytes
    topic_namespace: str = ""
    user_properties: dict[str, str] = field(default_factory=dict)
    tag: str | None = None                       # None: field absent
    keys: list[str] = field(default_factory=list)
    message_id: str = ""
    message_type: MessageType = MessageType.MESSAGE_TYPE_UNSPECIFIED
    born_timestamp_ms: int | None = None          # None: field absent
    born_host: str = ""
    body_encoding: BodyEncoding = BodyEncoding.IDENTITY
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    delivery_attempt: int = 0
    trace_context: str | None = None
    orphaned_transaction_recovery_s: int | None = None
    lite_topic: str | None = None
    priority: int | None = None


@dataclass(slots=True)
class SendReceipt:
    """One ``SendResultEntry``: the outcome of one message."""

    code: int                    # errors.Code value
    status_message: str
    message_id: str = ""
    transaction_id: str = ""
    offset: int = 0
    recall_handle: str = ""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """The part of a store ``TopicConfig`` the broker uses."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int                    # 4 read | 2 write | 1 inherit
    message_type: str            # NORMAL, FIFO, DELAY, TRANSACTION or MIXED

    @property
    def readable(self) -> bool:
        return bool(self.perm & 4)

    @property
    def writable(self) -> bool:
        return bool(self.perm & 2)


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """The part of a store ``SubscriptionGroupConfig`` the broker uses."""

    name: str
    consume_message_orderly: bool = False
    retry_max_times: int = 16


@dataclass(slots=True)
class StoreMessage:
    """The producer-side fields of a store ``Message`` (PutMessages input)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: str = ""          # "ip:port" / "[ipv6]:port"; "" = 127.0.0.1:0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    flag: int = 0
    allow_system_topic: bool = False  # the broker's own writes (timer, half messages)


@dataclass(slots=True)
class StoredMessage:
    """A record read back from the store (the fields the broker uses)."""

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
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """The store's ``PutResult`` for one message."""

    status: PutStatus
    queue_offset: int = -1
    phy_offset: int = -1
    offset_msg_id: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


__all__ = ["BodyEncoding", "ClientType", "GroupInfo", "IncomingMessage", "MessageType",
           "PutOutcome", "PutStatus", "SendReceipt", "StoreMessage", "StoredMessage", "TopicInfo"]


class TrafficObserver(Protocol):
    """Told what crossed the broker (the metrics implement it; tests may count)."""

    def messages_in(self, messages: Sequence[IncomingMessage], receipts: Sequence[SendReceipt]) -> None:
        """One SendMessage: the messages and their receipts, pairwise (only OK ones count)."""

    def messages_out(self, group: str, deliveries: Sequence[Any]) -> None:
        """One ReceiveMessage answer: ``consumer.Delivery`` items handed to ``group``."""
