"""Lite topics (RIP-83, RocketMQ 5.5 "Lite Mode"): names and rules every service shares. Pure.

A lite topic is a light message queue under a LITE parent topic (``message.type = LITE``): one
queue (id 0) named ``%LMQ%$<parent>$<lite topic>`` (RocketMQ's ``LiteUtil.toLmqName``), made by
the first message sent to it. A lite message is written once to the CommitLog under its parent
topic, with

| property | value |
|---|---|
| ``__LITE_TOPIC`` | the lite topic, as the client sent it (the proxy's ``MessageAccessor.setLiteTopic``) |
| ``INNER_MULTI_DISPATCH`` | the LMQ name: where dispatch indexes it besides the parent's queue |
| ``INNER_MULTI_QUEUE_OFFSET`` | its offset in the LMQ, written under the put lock over a placeholder of the same width (19 digits) |

so the lite index is a cache rebuilt from the CommitLog like every other one. A lite topic name is
1-64 UTF-8 bytes of ``[A-Za-z0-9_-]`` (the proxy's ``GrpcValidator.validateLiteTopic``); a parent's
``lite.topic.expiration`` (minutes, -1 = never, at most 30 days) is how long a lite topic may stay
without new messages before it is removed with its offsets.
"""

from __future__ import annotations

import re

from services.domain.attributes import long_range_attribute
from services.domain.format.properties_format import INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, LITE_TOPIC
from services.domain.names import validate_topic_name

LMQ_PREFIX = "%LMQ%"
LITE_SEPARATOR = "$"
LITE_TOPIC_PREFIX = LMQ_PREFIX + LITE_SEPARATOR
LMQ_QUEUE_ID = 0
LITE_TOPIC_SIZE_MAX_BYTES = 64  # ProxyConfig.maxLiteTopicSize; the settings' max_lite_topic_size
_LITE_TOPIC_CHARS = re.compile(r"[A-Za-z0-9_-]+")

# TopicAttributes.LITE_EXPIRATION_ATTRIBUTE: LongRangeAttribute("lite.topic.expiration", -1, 30 days, -1), minutes.
LITE_EXPIRATION_ATTRIBUTE = "lite.topic.expiration"
LITE_EXPIRATION_NEVER = -1
LITE_EXPIRATION_MAX_MINUTES = 30 * 24 * 60

# The LMQ offset's fixed width in INNER_MULTI_QUEUE_OFFSET (a Java Long parses leading zeros).
LMQ_OFFSET_DIGITS = 19
LMQ_OFFSET_PLACEHOLDER = "0" * LMQ_OFFSET_DIGITS


def lmq_name(parent_topic: str, lite_topic: str) -> str:
    return LITE_TOPIC_PREFIX + parent_topic + LITE_SEPARATOR + lite_topic


def split_lmq_name(lmq: str) -> tuple[str, str] | None:
    """(parent topic, lite topic) of a lite LMQ name, None if it is not one."""
    if not lmq.startswith(LITE_TOPIC_PREFIX):
        return None
    parent, separator, lite = lmq[len(LITE_TOPIC_PREFIX) :].partition(LITE_SEPARATOR)
    if not separator or not parent or not lite or LITE_SEPARATOR in lite:
        return None
    return parent, lite


def validate_lite_topic(name: str, size_max_bytes: int = LITE_TOPIC_SIZE_MAX_BYTES) -> str | None:
    """None if legal, else the proxy's reason (ILLEGAL_LITE_TOPIC)."""
    if not name or name.isspace():
        return "lite topic cannot be the char sequence of whitespace"
    if len(name.encode("utf-8")) > size_max_bytes:
        return f"lite topic exceed the max size {size_max_bytes}"
    if not _LITE_TOPIC_CHARS.fullmatch(name):
        return "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)"
    return None


def validate_lmq_name(lmq: str) -> str | None:
    """None if ``lmq`` is a lite topic's LMQ name (a legal parent and lite topic), else the reason."""
    parts = split_lmq_name(lmq)
    if parts is None:
        return f"{lmq} is not a lite topic's queue name ({LITE_TOPIC_PREFIX}parent{LITE_SEPARATOR}lite)"
    return validate_topic_name(parts[0]) or validate_lite_topic(parts[1])


def lite_expiration_minutes(attributes: dict[str, str]) -> int:
    """A LITE parent's ``lite.topic.expiration`` (-1: never; a bad or out-of-range value: never)."""
    return long_range_attribute(
        attributes, LITE_EXPIRATION_ATTRIBUTE, LITE_EXPIRATION_NEVER, LITE_EXPIRATION_MAX_MINUTES, LITE_EXPIRATION_NEVER
    )


def validate_topic_attribute(name: str, value: str) -> str | None:
    """None if ``name=value`` is a topic attribute an admin request may set, else the reason
    (``lite.topic.expiration``: minutes, -1 never, at most 30 days)."""
    if name != LITE_EXPIRATION_ATTRIBUTE:
        return f"unknown topic attribute {name!r} (known: {LITE_EXPIRATION_ATTRIBUTE})"
    try:
        minutes = int(value)
    except ValueError:
        return f"{name} must be a whole number of minutes, not {value!r}"
    if not (minutes == LITE_EXPIRATION_NEVER or 1 <= minutes <= LITE_EXPIRATION_MAX_MINUTES):
        return f"{name} must be -1 (never) or 1-{LITE_EXPIRATION_MAX_MINUTES} minutes, not {minutes}"
    return None


def offset_in_queue(queue_offset: int, properties: dict[str, str], source_topic: str) -> int:
    """A record's offset in the queue it was read from: a lite topic's queue (``source_topic`` an
    LMQ name) numbers its messages itself (``INNER_MULTI_QUEUE_OFFSET``), any other queue is the
    record's ``queue_offset``."""
    if source_topic.startswith(LITE_TOPIC_PREFIX) and properties.get(INNER_MULTI_DISPATCH) == source_topic:
        return int(properties[INNER_MULTI_QUEUE_OFFSET])
    return queue_offset


def lite_properties(properties: dict[str, str], parent_topic: str, lite_topic: str) -> None:
    """Add the lite properties to a message's; the store writes the LMQ offset over the
    placeholder under the put lock."""
    properties[LITE_TOPIC] = lite_topic
    properties[INNER_MULTI_DISPATCH] = lmq_name(parent_topic, lite_topic)
    properties[INNER_MULTI_QUEUE_OFFSET] = LMQ_OFFSET_PLACEHOLDER
