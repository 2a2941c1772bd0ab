"""The broker core's data: v2 requests as plain dataclasses, and what it asks of the store.

``v2/convert.py`` builds these from protobuf and back; nothing here imports gRPC. Field
names follow the v2 protocol (``message_group``, ``delivery_timestamp_ms``) on the client side
and RocketMQ's store vocabulary (``queue_offset``, ``phy_offset``) on the store side.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.domain.delivery import MessageType


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
    tag: str | None = None  # None: field absent
    keys: list[str] = field(default_factory=list)
    message_id: str = ""
    message_type: MessageType = MessageType.MESSAGE_TYPE_UNSPECIFIED
    born_timestamp_ms: int | None = None  # None: field absent
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

    code: int  # errors.Code value
    status_message: str
    message_id: str = ""
    transaction_id: str = ""
    offset: int = 0
    recall_handle: str = ""
    queue_id: int = -1  # the queue it was stored in (a PRIORITY message: its level); -1 unless stored


__all__ = ["BodyEncoding", "ClientType", "IncomingMessage", "MessageType", "SendReceipt"]


class TrafficObserver(Protocol):
    """Told what crossed the broker (the metrics implement it; tests may count)."""

    def messages_in(self, messages: Sequence[IncomingMessage], receipts: Sequence[SendReceipt]) -> None:
        """One SendMessage: the messages and their receipts, pairwise (only OK ones count)."""

    def messages_out(self, group: str, deliveries: Sequence[Any]) -> None:
        """One ReceiveMessage answer: ``consumer.Delivery`` items handed to ``group``."""
