"""v2 Messages <-> Arrow, for the "rocketmq" source (``BROKER_COLUMNS``) and sink.

Reading: ``to_batch`` turns pulled messages into one RecordBatch, column by column (one pass
over the protobufs; the batch must match the Spark schema exactly, to the Arrow type:
pipeline/README.md, "Spark's rules" 6).

Writing (``SinkColumns`` / ``to_messages``; the sink in pipeline/README.md): ``body`` (binary or
string; ``value`` is accepted for Kafka users) is required; ``topic`` unless the ``topic``
option is set (which then wins); optional ``tags`` (string), ``keys`` (array<string> or a
space-separated string), ``properties`` (map<string,string>), ``messageGroup`` (string: a FIFO
message), ``deliveryTimestamp`` (timestamp: a DELAY message), ``priority`` (an integer >= 0: a
PRIORITY message) and ``liteTopic`` (string: a LITE message to that lite topic of the row's
topic, a LITE parent). A row is one type: a row with two of messageGroup, deliveryTimestamp,
priority and liteTopic is refused (ValueError), as is a negative priority or an illegal lite
topic name (the broker would refuse the whole SendMessage). Other columns are ignored.
Each message gets a deterministic id, so a retried task re-sends the same ids (at-least-once,
duplicates detectable: "Spark's rules" 9).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from apache.rocketmq.v2 import definition_pb2 as d

from pipeline.errors import OptionError
from pipeline.schema import BROKER_COLUMNS, arrow_schema
from services.domain.lite import validate_lite_topic

if TYPE_CHECKING:
    from google.protobuf.timestamp_pb2 import Timestamp
    from pyspark.sql.types import StructType

_TYPE_NAMES = {value: name for name, value in d.MessageType.items()}


def _micros(ts: Timestamp) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def to_batch(broker: str, messages: list[d.Message]) -> pa.RecordBatch:
    topics, queue_ids, offsets, ids, tags, keys, bodies, props = [], [], [], [], [], [], [], []
    born, stored, born_hosts, store_hosts, types, groups, delivery, attempts = [], [], [], [], [], [], [], []
    lite_topics, priorities = [], []
    for message in messages:
        sp = message.system_properties
        topics.append(message.topic.name)
        queue_ids.append(sp.queue_id)
        offsets.append(sp.queue_offset)
        ids.append(sp.message_id)
        tags.append(sp.tag if sp.HasField("tag") else None)
        keys.append(list(sp.keys))
        bodies.append(message.body)
        props.append(list(message.user_properties.items()))
        born.append(_micros(sp.born_timestamp))
        stored.append(_micros(sp.store_timestamp) if sp.HasField("store_timestamp") else None)
        born_hosts.append(sp.born_host)
        store_hosts.append(sp.store_host)
        types.append(_TYPE_NAMES.get(sp.message_type, "NORMAL"))
        groups.append(sp.message_group if sp.HasField("message_group") else None)
        delivery.append(_micros(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None)
        attempts.append(sp.delivery_attempt if sp.HasField("delivery_attempt") else 1)
        lite_topics.append(sp.lite_topic if sp.HasField("lite_topic") else None)
        priorities.append(sp.priority if sp.HasField("priority") else None)
    schema = arrow_schema(BROKER_COLUMNS)
    count = len(messages)
    columns = [
        topics,
        [broker] * count,
        queue_ids,
        offsets,
        ids,
        tags,
        keys,
        bodies,
        props,
        born,
        stored,
        born_hosts,
        store_hosts,
        types,
        groups,
        delivery,
        attempts,
        lite_topics,
        priorities,
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, field.type) for values, field in zip(columns, schema)], schema=schema
    )


@dataclass(frozen=True)
class SinkColumns:
    """Where each input the sink knows is, validated against the DataFrame's schema."""

    body: str
    topic: str | None
    tags: str | None
    keys: str | None
    properties: str | None
    message_group: str | None
    delivery_timestamp: str | None
    priority: str | None = None
    lite_topic: str | None = None


_INTEGERS = ("tinyint", "smallint", "int", "bigint")
_INT32_MAX = 2**31 - 1  # SystemProperties.priority is an int32
_ALLOWED = {
    "body": ("binary", "string"),
    "value": ("binary", "string"),
    "topic": ("string",),
    "tags": ("string",),
    "keys": ("array<string>", "string"),
    "properties": ("map<string,string>",),
    "messageGroup": ("string",),
    "deliveryTimestamp": ("timestamp",),
    "priority": _INTEGERS,
    "liteTopic": ("string",),
}


def sink_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Validate a Spark schema for the sink; OptionError saying what is wrong."""
    types = {field.name: field.dataType.simpleString() for field in schema.fields}
    for name, kind in types.items():
        allowed = _ALLOWED.get(name)
        if allowed is not None and kind not in allowed:
            raise OptionError(f"rocketmq sink: column {name!r} must be {' or '.join(allowed)}, not {kind}")
    body = "body" if "body" in types else "value" if "value" in types else None
    if body is None:
        raise OptionError(
            "rocketmq sink: a 'body' column (binary or string) is required "
            f"(or 'value'); the DataFrame has {sorted(types)}"
        )
    if topic_option is None and "topic" not in types:
        raise OptionError("rocketmq sink: set the 'topic' option or give the DataFrame a 'topic' column")
    have = lambda name: name if name in types else None  # noqa: E731
    return SinkColumns(
        body,
        None if topic_option else "topic",
        have("tags"),
        have("keys"),
        have("properties"),
        have("messageGroup"),
        have("deliveryTimestamp"),
        have("priority"),
        have("liteTopic"),
    )


def message_id(*parts: object) -> str:
    """A deterministic 32-hex-digit id (the UNIQ_KEY form) from the row's coordinates."""
    return hashlib.md5("/".join(map(str, parts)).encode()).hexdigest().upper()


SendKey = tuple[str, str | None, str | None]  # (topic, message group, lite topic)


def to_messages(
    batch: pa.RecordBatch, columns: SinkColumns, topic_option: str | None, id_prefix: str, first_row: int
) -> list[tuple[SendKey, d.Message]]:
    """((topic, message group, lite topic), message) per row: a SendMessage carries one topic,
    and one message group or lite topic, so the broker keeps each on its one queue (and, over
    several broker groups, in one group)."""
    count = batch.num_rows

    def get(name: str | None) -> list[Any]:
        return batch.column(name).to_pylist() if name else [None] * count

    bodies, topics, tags, keys = get(columns.body), get(columns.topic), get(columns.tags), get(columns.keys)
    props, groups, delivery = get(columns.properties), get(columns.message_group), get(columns.delivery_timestamp)
    priorities, lite_topics = get(columns.priority), get(columns.lite_topic)
    out = []
    for i in range(count):
        row = first_row + i
        body = bodies[i]
        if body is None:
            raise ValueError(f"rocketmq sink: row {row} has a null {columns.body}")
        topic = topic_option or topics[i]
        if not topic:
            raise ValueError(f"rocketmq sink: row {row} has no topic")
        sp = d.SystemProperties(message_id=message_id(id_prefix, row), body_encoding=d.IDENTITY)
        if tags[i]:
            sp.tag = tags[i]
        row_keys = keys[i]
        if row_keys:
            sp.keys.extend(row_keys.split() if isinstance(row_keys, str) else [k for k in row_keys if k])
        group, at, priority, lite = groups[i], delivery[i], priorities[i], lite_topics[i]
        _check_one_type(row, group, at, priority, lite)
        if group is not None:
            sp.message_group = group
            sp.message_type = d.FIFO
        elif at is not None:
            sp.delivery_timestamp.FromDatetime(at)
            sp.message_type = d.DELAY
        elif priority is not None:
            if not 0 <= priority <= _INT32_MAX:
                raise ValueError(f"rocketmq sink: row {row} has priority {priority}; a priority is 0 to {_INT32_MAX}")
            sp.priority = priority
            sp.message_type = d.PRIORITY
        elif lite is not None:
            reason = validate_lite_topic(lite)
            if reason:
                raise ValueError(f"rocketmq sink: row {row} has liteTopic {lite!r}: {reason}")
            sp.lite_topic = lite
            sp.message_type = d.LITE
        else:
            sp.message_type = d.NORMAL
        message = d.Message(
            topic=d.Resource(name=topic), system_properties=sp, body=body.encode() if isinstance(body, str) else body
        )
        if props[i]:
            message.user_properties.update(dict(props[i]))
        out.append(((topic, group, lite), message))
    return out


def _check_one_type(row: int, group: str | None, at: datetime | None, priority: int | None, lite: str | None) -> None:
    """A row is a FIFO, DELAY, PRIORITY or LITE message, or none of them: never two."""
    given = [
        name
        for name, value in (
            ("messageGroup", group),
            ("deliveryTimestamp", at),
            ("priority", priority),
            ("liteTopic", lite),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ValueError(
            f"rocketmq sink: row {row} has both {' and '.join(given)}; a message has one type "
            "(messageGroup: FIFO, deliveryTimestamp: DELAY, priority: PRIORITY, liteTopic: LITE)"
        )
