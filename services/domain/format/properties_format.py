"""Message properties string: ``name 0x01 value 0x02`` for each entry.

| piece | bytes | meaning |
|---|---|---|
| name | UTF-8 | property name, no 0x01/0x02 |
| NAME_VALUE_SEPARATOR | 1 (0x01) | between name and value |
| value | UTF-8 | property value, no 0x01/0x02 |
| PROPERTY_SEPARATOR | 1 (0x02) | after every value (so a non-empty string ends with 0x02) |

An empty map encodes to the empty string. Decoding follows Java's ``string2messageProperties``:
segments shorter than 3 characters, empty names and empty values are dropped, and a later
duplicate overwrites an earlier one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Literal

from services.domain.format.java_compat import java_hashmap_order

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTIES_SIZE_MAX_BYTES = 32767  # int16 length on disk

# Property names: RocketMQ's MessageConst names without the ``PROPERTY_`` prefix, values spelled
# exactly as RocketMQ writes them.
KEYS = "KEYS"
TAGS = "TAGS"
WAIT_STORE_MSG_OK = "WAIT"
DELAY_TIME_LEVEL = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
BUYER_ID = "BUYER_ID"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
TRANSFER_FLAG = "TRANSFER_FLAG"
CORRECTION_FLAG = "CORRECTION_FLAG"
MQ2_FLAG = "MQ2_FLAG"
RECONSUME_TIME = "RECONSUME_TIME"
MSG_REGION = "MSG_REGION"
TRACE_SWITCH = "TRACE_ON"
UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
EXTEND_UNIQ_INFO = "EXTEND_UNIQ_INFO"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
DUP_INFO = "DUP_INFO"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
INSTANCE_ID = "INSTANCE_ID"
CORRELATION_ID = "CORRELATION_ID"
MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
MESSAGE_TTL = "TTL"
REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
CLUSTER = "CLUSTER"
MESSAGE_TYPE = "MSG_TYPE"
POP_CK = "POP_CK"
POP_CK_OFFSET = "POP_CK_OFFSET"
FIRST_POP_TIME = "1ST_POP_TIME"
SHARDING_KEY = "__SHARDINGKEY"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
LITE_TOPIC = "__LITE_TOPIC"  # a lite message's lite topic (RIP-83, RocketMQ 5.5)
TRACE_CONTEXT = "TRACE_CONTEXT"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
BORN_HOST = "__BORNHOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
PRIORITY = "_SYS_MSG_PRIORITY_"  # a PRIORITY message's priority, decimal (RIP-80, RocketMQ 5.4)
CRC32 = "__CRC32#"  # the whole-record CRC trailer; never a caller's property
KEY_SEPARATOR = " "
TRANSIENT_PREFIX = "__RMQ.TRANSIENT."

# MessageConst.STRING_HASH_SET: the names a user property may not take.
RESERVED_PROPERTY_KEYS = frozenset(
    {
        TRACE_SWITCH,
        MSG_REGION,
        KEYS,
        TAGS,
        WAIT_STORE_MSG_OK,
        DELAY_TIME_LEVEL,
        RETRY_TOPIC,
        REAL_TOPIC,
        REAL_QUEUE_ID,
        TRANSACTION_PREPARED,
        PRODUCER_GROUP,
        MIN_OFFSET,
        MAX_OFFSET,
        BUYER_ID,
        ORIGIN_MESSAGE_ID,
        TRANSFER_FLAG,
        CORRECTION_FLAG,
        MQ2_FLAG,
        RECONSUME_TIME,
        UNIQ_KEY,
        MAX_RECONSUME_TIMES,
        CONSUME_START_TIMESTAMP,
        POP_CK,
        POP_CK_OFFSET,
        FIRST_POP_TIME,
        TRANSACTION_PREPARED_QUEUE_OFFSET,
        DUP_INFO,
        EXTEND_UNIQ_INFO,
        INSTANCE_ID,
        CORRELATION_ID,
        MESSAGE_REPLY_TO_CLIENT,
        MESSAGE_TTL,
        REPLY_MESSAGE_ARRIVE_TIME,
        PUSH_REPLY_TIME,
        CLUSTER,
        MESSAGE_TYPE,
        INNER_MULTI_QUEUE_OFFSET,
        TIMER_DELAY_MS,
        TIMER_DELAY_SEC,
        TIMER_DELIVER_MS,
        TIMER_ENQUEUE_MS,
        TIMER_DEQUEUE_MS,
        TIMER_ROLL_TIMES,
        TIMER_OUT_MS,
        TIMER_DEL_UNIQKEY,
        TIMER_DELAY_LEVEL,
        BORN_HOST,
        BORN_TIMESTAMP,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        PRIORITY,
        CRC32,
    }
)
assert len(RESERVED_PROPERTY_KEYS) == 52


class PropertiesError(ValueError):
    """A property name or value cannot be encoded (contains a separator character).

    ``index``: the message's position in its batch, when raised for a batch."""

    index = 0


_JAVA_ORDER_CACHE: dict[tuple[str, ...], list[str]] = {}
_JAVA_ORDER_CACHE_MAX = 4096


def _java_order(properties: Mapping[str, object]) -> list[str]:
    """Java HashMap order of the names, cached per name tuple (producers repeat the same names)."""
    names = tuple(properties)
    order = _JAVA_ORDER_CACHE.get(names)
    if order is None:
        if len(_JAVA_ORDER_CACHE) >= _JAVA_ORDER_CACHE_MAX:
            _JAVA_ORDER_CACHE.clear()
        order = _JAVA_ORDER_CACHE[names] = java_hashmap_order(list(names))
    return order


def encode_properties(properties: dict[str, str], java_order: bool = False) -> bytes:
    """Encode ``properties``; with ``java_order`` in the order a Java broker writes them."""
    if not properties:
        return b""
    keys = _java_order(properties) if java_order else properties
    parts = []
    for name in keys:
        value = properties[name]
        if value is None or name.startswith(TRANSIENT_PREFIX):
            continue
        parts.append(f"{name}\x01{value}\x02")
    text = "".join(parts)
    return text.encode("utf-8")


def encode_properties_checked(properties: dict[str, str]) -> bytes:
    """:func:`encode_properties` in Java order, raising PropertiesError for what
    :func:`check_properties` rejects (the separators are counted in C).

    Producers repeat the same property names, so each name tuple gets a plan once: its Java
    order, one ``%``-template for all pairs and an itemgetter for the values; a message is then
    one getter call, one format and one encode.
    """
    if not properties:
        return b""
    names = tuple(properties)
    plan = _PLANS.get(names)
    if plan is None:
        plan = _plan(names)
    if plan is not False:
        template, values, count = plan
        picked = values(properties)
        if None not in picked:  # a None value: the general path skips it
            text = template % picked
            if text.count("\x01") == count and text.count("\x02") == count:
                return text.encode("utf-8")
            check_properties(properties)  # a value holds a separator: raises naming it
    parts = [
        f"{name}\x01{properties[name]}\x02"
        for name in _java_order(properties)
        if properties[name] is not None and not name.startswith(TRANSIENT_PREFIX)
    ]
    text = "".join(parts)
    if text.count("\x01") != len(parts) or text.count("\x02") != len(parts) or "" in properties or CRC32 in properties:
        check_properties(properties)  # raises with the offending name
    return text.encode("utf-8")


_Plan = tuple[str, Callable[[dict[str, str]], tuple[str, ...]], int]
_PLANS: dict[tuple[str, ...], _Plan | Literal[False]] = {}


def _plan(names: tuple[str, ...]) -> _Plan | Literal[False]:
    """The encoding plan for a name tuple, or False when the general path must handle it (a
    name that is illegal, or every name transient)."""
    if len(_PLANS) >= _JAVA_ORDER_CACHE_MAX:
        _PLANS.clear()
    order = [name for name in _java_order(dict.fromkeys(names)) if not name.startswith(TRANSIENT_PREFIX)]
    plan: _Plan | Literal[False] = False
    if order and all(name and "\x01" not in name and "\x02" not in name and name != CRC32 for name in order):
        template = "".join(f"{name.replace('%', '%%')}\x01%s\x02" for name in order)
        if len(order) == 1:
            only = order[0]
            plan = (template, lambda properties: (properties[only],), 1)
        else:
            plan = (template, operator.itemgetter(*order), len(order))
    _PLANS[names] = plan
    return plan


def check_properties(properties: dict[str, str]) -> None:
    """Raise PropertiesError when a name or value holds a separator or a name is empty/reserved."""
    for name, value in properties.items():
        if not name or "\x01" in name or "\x02" in name or name == CRC32:
            raise PropertiesError(f"illegal property name {name!r}")
        if value is not None and ("\x01" in value or "\x02" in value):
            raise PropertiesError(f"illegal value for property {name!r}")


def decode_properties(data: bytes | str) -> dict[str, str]:
    """Decode a properties string exactly as Java's ``string2messageProperties`` does."""
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray, memoryview)) else data
    result: dict[str, str] = {}
    if not text:
        return result
    if "\x01" in text and text.count("\x02") == text.count("\x01") and text.endswith("\x02"):
        # Fast path for the well-formed common case; falls back for odd inputs.
        for segment in text[:-1].split("\x02"):
            name, sep, value = segment.partition("\x01")
            if not sep or not name or not value or "\x01" in value:
                return _decode_slow(text)
            result[name] = value
        return result
    return _decode_slow(text)


def _decode_slow(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    index = 0
    length = len(text)
    while index < length:
        segment_end = text.find("\x02", index)
        if segment_end < 0:
            segment_end = length
        if segment_end - index >= 3:
            kv = text.find("\x01", index)
            if index < kv < segment_end - 1:
                result[text[index:kv]] = text[kv + 1 : segment_end]
        index = segment_end + 1
    return result
