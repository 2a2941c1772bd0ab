"""How a stored record appears to a v2 consumer, the rules every reader of stored messages shares
(the broker's ReceiveMessage and PullMessage, the Spark pipeline's columns): which properties are
the system's and never shown as user properties, the v2 message type a record reads back as, and
its delivery time. Pure: no I/O, imports nothing else of the project but the domain.
"""

from __future__ import annotations

import enum

from services.domain.format.properties_format import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    DELAY_TIME_LEVEL,
    INNER_MULTI_DISPATCH,
    LITE_TOPIC,
    PRIORITY,
    RESERVED_PROPERTY_KEYS,
    SHARDING_KEY,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TRACE_CONTEXT,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
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


# Keys a v2 send may not take as user properties, beyond RESERVED_PROPERTY_KEYS (services/broker/
# validation.py refuses them; pyrmq: the proxy takes them): keys the broker writes whose presence
# changes how a message is typed, checked or dispatched. A user-set ``__SHARDINGKEY`` would make a
# NORMAL message read back as FIFO, a user-set ``__transactionId__`` or ``TRANSACTION_CHECK_TIMES``
# would confuse the transaction checker, a user-set ``INNER_MULTI_DISPATCH`` would index the message
# in another lite topic.
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
# The keys a delivered message's user properties leave out. The proxy's
# ``GrpcConverter.buildUserAttributes`` drops exactly ``MessageConst.STRING_HASH_SET``
# (RESERVED_PROPERTY_KEYS) and passes every other stored property through: ``__SHARDINGKEY`` (FIFO),
# ``__transactionId__``, ``CHECK_IMMUNITY_TIME_IN_SECONDS`` and ``TRANSACTION_CHECK_TIMES``
# (transactions), ``TRACE_CONTEXT``, and a user's own ``REAL_X`` or ``TIMER_X``. (pyrmq) The lite
# index's two keys are left out too: a LITE delivery states its lite topic in ``lite_topic``, and
# ``INNER_MULTI_DISPATCH`` names the store's LMQ (services/broker/README.md, Deviations).
HIDDEN_PROPERTY_KEYS = RESERVED_PROPERTY_KEYS | frozenset({LITE_TOPIC, INNER_MULTI_DISPATCH})


def is_internal_property(key: str) -> bool:
    """Whether a stored property is left out of a delivered message's user properties."""
    return key in HIDDEN_PROPERTY_KEYS


def user_properties(properties: dict[str, str]) -> dict[str, str]:
    """A delivered message's user properties: the stored ones but HIDDEN_PROPERTY_KEYS."""
    hidden = HIDDEN_PROPERTY_KEYS
    return {k: v for k, v in properties.items() if k not in hidden}


def delivered_message_type(properties: dict[str, str]) -> MessageType:
    """The v2 type of a delivered message: TRAN_MSG -> TRANSACTION, timer keys -> DELAY, group -> FIFO,
    priority -> PRIORITY, lite topic -> LITE (the proxy's ``GrpcConverter.buildSystemProperties``, which
    takes TRAN_MSG only when exactly ``true``; PRIORITY and LITE after FIFO as RocketMQ 5.4 and 5.5's
    ``TopicMessageType.parseFromMessageProperty``)."""
    if properties.get(TRANSACTION_PREPARED) == "true":
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
