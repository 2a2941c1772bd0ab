"""HEART_BEAT 34's body: HeartbeatData (../shared/docs/remoting.md §2.3 "HEART_BEAT 34";
RocketMQ's ``heartbeat/HeartbeatData``, ``ConsumerData``, ``ProducerData``, ``SubscriptionData``).

| key | type | notes |
|---|---|---|
| clientID | string | ``ip@instance``; required |
| producerDataSet | [{groupName}] | |
| consumerDataSet | [ConsumerData] | |
| heartbeatFingerprint | int | HeartbeatV2 (5.x, opt-in) |
| withoutSub | bool | HeartbeatV2: subscriptions left out, unchanged since the last one |

ConsumerData: ``groupName`` (required), ``consumeType`` (CONSUME_ACTIVELY pull, CONSUME_PASSIVELY
push, CONSUME_POP), ``messageModel`` (CLUSTERING, BROADCASTING), ``consumeFromWhere``,
``subscriptionDataSet``, ``unitMode``. SubscriptionData: ``topic`` (required), ``subString``,
``expressionType`` (TAG, SQL92), ``tagsSet``, ``codeSet``, ``subVersion``, ``classFilterMode``.

What each client sends differs, and all of it is read:

* Java: every key above (``subVersion`` a number).
* ali-ons: no ``heartbeatFingerprint``/``withoutSub``; no ``expressionType`` on TAG
  subscriptions.
* The C++ client: no ``unitMode``, no ``expressionType``, ``subVersion`` as a *string* of
  digits, ``tagsSet``/``codeSet``/``subscriptionDataSet``/``producerDataSet`` left out when
  empty, and a trailing newline. The build PyPI's rocketmq-client-python 0.5.0rc2 bundles writes
  ``consumeType``, ``messageModel`` and ``consumeFromWhere`` as *numbers*, which fastjson reads as
  the Java enums' ordinals (``CONSUME_TYPES``, ``MESSAGE_MODELS``, ``CONSUME_FROM_WHERES``); so
  does this parser. Its 1.x ``codeSet`` is not the tags' hash codes, so a broker filtering by tag
  should rebuild them from ``subString`` (services/domain/remoting/tags.py
  ``parse_tag_expression``).

Missing keys take the Java client's defaults: subString "*", expressionType TAG, consumeType
CONSUME_PASSIVELY, messageModel CLUSTERING, consumeFromWhere CONSUME_FROM_LAST_OFFSET.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.domain.remoting.fastjson_codec import BodyError, as_int, expect, fastjson_dumpb, fastjson_loads

EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
CONSUME_POP = "CONSUME_POP"
CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
# The Java enums in ordinal order: fastjson reads a number as the constant at that ordinal.
CONSUME_TYPES = (CONSUME_ACTIVELY, CONSUME_PASSIVELY, CONSUME_POP)  # ConsumeType
MESSAGE_MODELS = (BROADCASTING, CLUSTERING)  # MessageModel
CONSUME_FROM_WHERES = (  # ConsumeFromWhere (the middle three deprecated)
    CONSUME_FROM_LAST_OFFSET,
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic a consumer group subscribes to, as its client sent it."""

    topic: str
    sub_string: str = "*"
    expression_type: str = EXPRESSION_TAG
    tags: tuple[str, ...] = ()
    codes: tuple[int, ...] = ()
    sub_version: int = 0
    class_filter_mode: bool = False

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": self.codes,
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags,
            "topic": self.topic,
        }


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group of the client: how it consumes and what it subscribes to."""

    group: str
    consume_type: str = CONSUME_PASSIVELY
    message_model: str = CLUSTERING
    consume_from_where: str = CONSUME_FROM_LAST_OFFSET
    subscriptions: tuple[Subscription, ...] = ()
    unit_mode: bool = False

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.message_model,
            "subscriptionDataSet": self.subscriptions,
            "unitMode": self.unit_mode,
        }


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """A client's heartbeat: its id, producer groups and consumer groups."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()
    heartbeat_fingerprint: int = 0
    without_sub: bool = False

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": self.consumers,
            "heartbeatFingerprint": self.heartbeat_fingerprint,
            "producerDataSet": [{"groupName": group} for group in self.producer_groups],
            "withoutSub": self.without_sub,
        }


def encode_heartbeat(data: HeartbeatData) -> bytes:
    """The body the Java client sends (for tests and tools)."""
    return fastjson_dumpb(data)


def _bool(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _text(fields: dict[str, Any], key: str, default: str, what: str) -> str:
    value = fields.get(key)
    return default if value is None or value == "" else expect(value, str, f"{what}.{key}")


_DEFAULTS = {"consumeType": CONSUME_PASSIVELY, "messageModel": CLUSTERING, "consumeFromWhere": CONSUME_FROM_LAST_OFFSET}


def _enum(fields: dict[str, Any], key: str, names: tuple[str, ...], what: str) -> str:
    """An enum field: its name, or a number read as the Java constant at that ordinal (as
    fastjson reads it); the Java client's default when missing, null or empty."""
    value = fields.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < len(names):
            raise BodyError(f"{what}.{key}: ordinal {value} is not one of {len(names)} constants")
        return names[value]
    return _text(fields, key, _DEFAULTS[key], what)


def _list(fields: dict[str, Any], key: str, what: str) -> list[Any]:
    value = fields.get(key)
    return [] if value is None else expect(value, list, f"{what}.{key}")


def _subscription(value: object, what: str) -> Subscription:
    fields = expect(value, dict, what)
    topic = fields.get("topic")
    if not topic:
        raise BodyError(f"{what}: subscription without a topic")
    return Subscription(
        topic=expect(topic, str, f"{what}.topic"),
        sub_string=_text(fields, "subString", "*", what),
        expression_type=_text(fields, "expressionType", EXPRESSION_TAG, what),
        tags=tuple(expect(tag, str, f"{what}.tagsSet") for tag in _list(fields, "tagsSet", what)),
        codes=tuple(as_int(code, f"{what}.codeSet") for code in _list(fields, "codeSet", what)),
        sub_version=as_int(fields.get("subVersion") or 0, f"{what}.subVersion"),
        class_filter_mode=_bool(fields.get("classFilterMode")),
    )


def _consumer(value: object, what: str) -> ConsumerData:
    fields = expect(value, dict, what)
    group = fields.get("groupName")
    if not group:
        raise BodyError(f"{what}: consumer data without a groupName")
    return ConsumerData(
        group=expect(group, str, f"{what}.groupName"),
        consume_type=_enum(fields, "consumeType", CONSUME_TYPES, what),
        message_model=_enum(fields, "messageModel", MESSAGE_MODELS, what),
        consume_from_where=_enum(fields, "consumeFromWhere", CONSUME_FROM_WHERES, what),
        subscriptions=tuple(
            _subscription(s, f"{what}.subscriptionDataSet[{i}]")
            for i, s in enumerate(_list(fields, "subscriptionDataSet", what))
        ),
        unit_mode=_bool(fields.get("unitMode")),
    )


def parse_heartbeat(data: bytes | str) -> HeartbeatData:
    """A HEART_BEAT body from any of the clients above; BodyError (a ValueError) when it is not
    JSON, has no ``clientID``, or a group or subscription lacks its name or topic."""
    fields = expect(fastjson_loads(data), dict, "heartbeat")
    client_id = fields.get("clientID")
    if not client_id:
        raise BodyError("heartbeat without a clientID")
    producers = []
    for i, producer in enumerate(_list(fields, "producerDataSet", "heartbeat")):
        group = expect(producer, dict, f"producerDataSet[{i}]").get("groupName")
        if group:
            producers.append(expect(group, str, f"producerDataSet[{i}].groupName"))
    return HeartbeatData(
        client_id=expect(client_id, str, "clientID"),
        producer_groups=tuple(producers),
        consumers=tuple(
            _consumer(c, f"consumerDataSet[{i}]") for i, c in enumerate(_list(fields, "consumerDataSet", "heartbeat"))
        ),
        heartbeat_fingerprint=as_int(fields.get("heartbeatFingerprint") or 0, "heartbeatFingerprint"),
        without_sub=_bool(fields.get("withoutSub")),
    )
