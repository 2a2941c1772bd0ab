"""Send-side request checks, each raising ``RequestError`` with the exact v2 code.

Mirrors the RocketMQ 5 proxy (``SendMessageActivity``, ``GrpcValidator``); rules the proxy lacks
but our store needs are marked "(pyrmq)": the store refuses a whole PutMessages batch on one bad
message, so nothing it would refuse may reach a coalesced batch.

| rule | code |
|---|---|
| topic: blank, bad characters, too long; a system topic | ILLEGAL_TOPIC |
| body empty / over ``body_size_max_bytes`` | MESSAGE_BODY_EMPTY / MESSAGE_BODY_TOO_LARGE |
| more than 128 user properties; keys+values+tag+keys over 16 KiB | MESSAGE_PROPERTIES_TOO_LARGE |
| user property key reserved (``RESERVED_PROPERTY_KEYS``) or written by the broker (pyrmq), empty (pyrmq), or key/value with a control character | ILLEGAL_MESSAGE_PROPERTY_KEY |
| tag all whitespace, containing ``|`` or a control character | ILLEGAL_MESSAGE_TAG |
| key all whitespace or with a control character | ILLEGAL_MESSAGE_KEY |
| message id blank, or with a control character (pyrmq) | ILLEGAL_MESSAGE_ID |
| transaction recovery duration over 1 h | BAD_REQUEST |
| delivery timestamp more than `delivery_delay_max_ms` (1 day, maxDelayTimeMills) ahead | ILLEGAL_DELIVERY_TIME |
| message group blank, >= 64 UTF-8 bytes, or with a control character | ILLEGAL_MESSAGE_GROUP |
| lite topic blank, over 64 UTF-8 bytes, or not of ``[A-Za-z0-9_-]`` | ILLEGAL_LITE_TOPIC |
| priority below 0 (the proxy's ``setPriority`` throws; pyrmq answers BAD_REQUEST, not INTERNAL_SERVER_ERROR) | BAD_REQUEST |
| message type contradicting the message's fields; topic type mismatch | MESSAGE_PROPERTY_CONFLICT_WITH_TYPE |

"Control character" is Java's ``Character.isISOControl`` (U+0000-U+001F, U+007F-U+009F);
"blank" is commons-lang ``StringUtils.isBlank`` (empty or all ``Character.isWhitespace``).
"""

from __future__ import annotations

import re

from services.broker.errors import Code, RequestError
from services.broker.model import IncomingMessage
from services.domain import lite as lite_rules
from services.domain.delivery import BROKER_PROPERTY_KEYS, MessageType
from services.domain.format.properties_format import (
    RESERVED_PROPERTY_KEYS,
)
from services.domain.names import is_system_topic, validate_topic_name

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Unicode whitespace that Java's Character.isWhitespace does not count (non-breaking spaces).
_NOT_JAVA_WHITESPACE = frozenset("\u00a0\u2007\u202f")


def has_control_character(text: str) -> bool:
    return _CONTROL.search(text) is not None


def is_blank(text: str) -> bool:
    """commons-lang ``StringUtils.isBlank``: empty or only Java whitespace."""
    if text and not text[0].isspace():  # the common case, without a generator
        return False
    return all(ch.isspace() and ch not in _NOT_JAVA_WHITESPACE for ch in text)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def validate_topic(name: str) -> None:
    reason = validate_topic_name(name)
    if reason:
        raise RequestError(reason, Code.ILLEGAL_TOPIC)
    if is_system_topic(name):
        raise RequestError(f"cannot access system topic: {name}", Code.ILLEGAL_TOPIC)


def validate_body(body: bytes, size_max_bytes: int) -> None:
    if not body:
        raise RequestError("message body cannot be empty", Code.MESSAGE_BODY_EMPTY)
    if len(body) > size_max_bytes:
        raise RequestError(f"message body cannot exceed the max {size_max_bytes}", Code.MESSAGE_BODY_TOO_LARGE)


def validate_user_properties(properties: dict[str, str], count_max: int) -> int:
    """Check every key and value; the UTF-8 bytes of keys and values together."""
    if len(properties) > count_max:
        raise RequestError(f"too many user properties, max is {count_max}", Code.MESSAGE_PROPERTIES_TOO_LARGE)
    size = 0
    for key, value in properties.items():
        if key in RESERVED_PROPERTY_KEYS or key in BROKER_PROPERTY_KEYS:
            raise RequestError(f"property is used by system: {key}", Code.ILLEGAL_MESSAGE_PROPERTY_KEY)
        if not key:
            raise RequestError("the key of property cannot be empty", Code.ILLEGAL_MESSAGE_PROPERTY_KEY)
        if has_control_character(key):
            raise RequestError(
                "the key of property cannot contain control character", Code.ILLEGAL_MESSAGE_PROPERTY_KEY
            )
        if has_control_character(value):
            raise RequestError(
                "the value of property cannot contain control character", Code.ILLEGAL_MESSAGE_PROPERTY_KEY
            )
        size += utf8_len(key) + utf8_len(value)
    return size


def validate_tag(tag: str | None) -> None:
    if not tag:
        return
    if is_blank(tag):
        raise RequestError("tag cannot be the char sequence of whitespace", Code.ILLEGAL_MESSAGE_TAG)
    if "|" in tag:
        raise RequestError("tag cannot contain '|'", Code.ILLEGAL_MESSAGE_TAG)
    if has_control_character(tag):
        raise RequestError("tag cannot contain control character", Code.ILLEGAL_MESSAGE_TAG)


def validate_key(key: str) -> None:
    if not key:
        return
    if is_blank(key):
        raise RequestError("key cannot be the char sequence of whitespace", Code.ILLEGAL_MESSAGE_KEY)
    if has_control_character(key):
        raise RequestError("key cannot contain control character", Code.ILLEGAL_MESSAGE_KEY)


def validate_message_id(message_id: str) -> None:
    if is_blank(message_id):
        raise RequestError("message id cannot be empty", Code.ILLEGAL_MESSAGE_ID)
    if has_control_character(message_id):
        raise RequestError("message id cannot contain control character", Code.ILLEGAL_MESSAGE_ID)


def validate_message_group(group: str | None, size_max_bytes: int) -> None:
    if not group:
        return
    if is_blank(group):
        raise RequestError("message group cannot be the char sequence of whitespace", Code.ILLEGAL_MESSAGE_GROUP)
    if utf8_len(group) >= size_max_bytes:
        raise RequestError(f"message group exceed the max size {size_max_bytes}", Code.ILLEGAL_MESSAGE_GROUP)
    if has_control_character(group):
        raise RequestError("message group cannot contain control character", Code.ILLEGAL_MESSAGE_GROUP)


def validate_delivery_timestamp(delivery_timestamp_ms: int, now_ms: int, delay_max_ms: int) -> None:
    """A past time is fine (delivered at once); more than ``delay_max_ms`` ahead is not."""
    if delivery_timestamp_ms - now_ms > delay_max_ms:
        raise RequestError(
            f"the max delay time of message is too large, max is {delay_max_ms}", Code.ILLEGAL_DELIVERY_TIME
        )


def validate_transaction_recovery(seconds: int, max_s: int) -> None:
    if seconds > max_s:
        raise RequestError(
            f"the max transaction recovery time of message is too large, max is {max_s}", Code.BAD_REQUEST
        )


def effective_message_type(message: IncomingMessage) -> MessageType:
    """The type the message's fields make it; a stated type that contradicts them is refused.

    Order as the broker derives it from properties (``TopicMessageType.parseFromMessageProperty``):
    TRANSACTION (stated), DELAY (delivery timestamp), FIFO (message group), PRIORITY (a
    priority), else NORMAL. A priority beside a type that comes first is dropped, as RocketMQ's
    broker strips it (so the topic's type decides: a PRIORITY topic refuses such a message).
    UNSPECIFIED takes the derived type.
    """
    has_group = bool(message.message_group)
    has_delivery = message.delivery_timestamp_ms is not None
    stated = message.message_type
    if message.lite_topic is not None and (has_group or has_delivery or message.priority is not None):
        raise RequestError(
            "a lite message cannot have a message group, a delivery timestamp or a priority",
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        )
    if stated is MessageType.TRANSACTION:
        if has_group or has_delivery or message.lite_topic is not None:
            raise RequestError(
                "a transaction message cannot have a message group, a delivery timestamp or a lite topic",
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            )
        return MessageType.TRANSACTION
    if has_group and has_delivery:
        raise RequestError(
            "message group and delivery timestamp are exclusive", Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        )
    if has_delivery:
        derived = MessageType.DELAY
    elif has_group:
        derived = MessageType.FIFO
    elif message.priority is not None:
        derived = MessageType.PRIORITY
    elif message.lite_topic is not None:
        derived = MessageType.LITE
    else:
        derived = MessageType.NORMAL
    if stated is not MessageType.MESSAGE_TYPE_UNSPECIFIED and stated is not derived:
        raise RequestError(
            f"message type {stated.name} conflicts with the message's fields ({derived.name})",
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        )
    return derived


def validate_lite_topic(name: str) -> None:
    reason = lite_rules.validate_lite_topic(name)
    if reason:
        raise RequestError(reason, Code.ILLEGAL_LITE_TOPIC)


def validate_priority(priority: int) -> None:
    """``Message.setPriority``: a priority is 0 or more (larger is more urgent; above the topic's
    top level it is stored there)."""
    if priority < 0:
        raise RequestError(f"The priority must be greater than or equal to 0, not {priority}", Code.BAD_REQUEST)


def validate_topic_accepts(topic: str, topic_type: str, message_type: MessageType) -> None:
    """``DefaultTopicMessageTypeValidator``: the type must equal the topic's, unless MIXED."""
    if topic_type != "MIXED" and topic_type != message_type.name:
        raise RequestError(
            f"topic {topic} accepts {topic_type} messages, not {message_type.name}",
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        )
