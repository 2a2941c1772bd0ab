"""How a stored record appears to a v2 consumer, the rules every reader of stored messages shares
(the broker's ReceiveMessage and PullMessage, the Spark pipeline's columns): which properties are
the system's and never shown as user properties, the v2 message type a record reads back as, and
its delivery time. Pure: no I/O, imports nothing else of the project but the domain.
"""

from __future__ import annotations

import enum

from services.domain.format.properties_format import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    CLUSTER,
    CRC32,
    DELAY_TIME_LEVEL,
    FIRST_POP_TIME,
    INNER_MULTI_DISPATCH,
    LITE_TOPIC,
    MESSAGE_TYPE,
    ORIGIN_MESSAGE_ID,
    POP_CK,
    PRIORITY,
    RESERVED_PROPERTY_KEYS,
    RETRY_TOPIC,
    SHARDING_KEY,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TRACE_CONTEXT,
    TRACE_SWITCH,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    WAIT_STORE_MSG_OK,
)


class MessageType(enum.IntEnum):
    """``apache.rocketmq.v2.MessageType`` (pair-asserted in rpc/convert.py)."""

    MESSAGE_TYPE_UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


# (pyrmq) Keys the broker writes whose presence changes how a message is typed or delivered:
# a user-set ``__SHARDINGKEY`` would make a NORMAL message read back as FIFO, a user-set
# ``__transactionId__`` would confuse the transaction checker. The proxy lets them through.
BROKER_PROPERTY_KEYS = frozenset(
    {
        SHARDING_KEY,
        TRACE_CONTEXT,
        CHECK_IMMUNITY_TIME_IN_SECONDS,
        TRANSACTION_ID,
        TRANSACTION_CHECK_TIMES,
        LITE_TOPIC,
        INNER_MULTI_DISPATCH,
    }
)
_INTERNAL_KEYS = (
    RESERVED_PROPERTY_KEYS
    | BROKER_PROPERTY_KEYS
    | frozenset(
        {
            WAIT_STORE_MSG_OK,
            CLUSTER,
            RETRY_TOPIC,
            ORIGIN_MESSAGE_ID,
            TRANSACTION_CHECK_TIMES,
            POP_CK,
            FIRST_POP_TIME,
            MESSAGE_TYPE,
            TRACE_SWITCH,
        }
    )
)
_INTERNAL_PREFIXES = ("DLQ_ORIGIN_", "REAL_", CRC32, "TIMER_", "POP_")


def is_internal_property(key: str) -> bool:
    return key in _INTERNAL_KEYS or key.startswith(_INTERNAL_PREFIXES)


def user_properties(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if not is_internal_property(k)}


def delivered_message_type(properties: dict[str, str]) -> MessageType:
    """The v2 type of a delivered message: TRAN_MSG -> TRANSACTION, timer keys -> DELAY, group -> FIFO,
    priority -> PRIORITY (``TopicMessageType.parseFromMessageProperty``'s order)."""
    if properties.get(TRANSACTION_PREPARED, "").lower() == "true":
        return MessageType.TRANSACTION
    if any(k in properties for k in (DELAY_TIME_LEVEL, TIMER_DELIVER_MS, TIMER_DELAY_SEC)):
        return MessageType.DELAY
    if SHARDING_KEY in properties:
        return MessageType.FIFO
    if PRIORITY in properties:
        return MessageType.PRIORITY
    if LITE_TOPIC in properties:
        return MessageType.LITE
    return MessageType.NORMAL


def delivery_timestamp_ms(properties: dict[str, str], store_timestamp_ms: int) -> int | None:
    for key, base in ((TIMER_DELIVER_MS, 0), (TIMER_DELAY_SEC, None)):
        value = properties.get(key)
        if value is None:
            continue
        try:
            number = int(value)
        except ValueError:
            continue
        return number if base is not None else store_timestamp_ms + number * 1000
    return None
