"""v2 Messages <-> Arrow, for the "rocketmq" source (``BROKER_COLUMNS``) and sink.

Reading: ``to_batch`` turns pulled messages into one RecordBatch, column by column (one pass
over the protobufs; the batch must match the Spark schema exactly, to the Arrow type:
pipeline/README.md, "Spark's rules" 6).

Writing (``SinkColumns`` / ``to_messages``; the sink in pipeline/README.md): ``body`` (binary or
string; ``value`` is accepted for Kafka users) is required; ``topic`` unless the ``topic``
option is set (which then wins); optional ``tags`` (string), ``keys`` (array<string> or a
space-separated string), ``properties`` (map<string,string>), ``messageGroup`` (string: a FIFO
message) and ``deliveryTimestamp`` (timestamp: a DELAY message). Other columns are ignored.
Each message gets a deterministic id, so a retried task re-sends the same ids (at-least-once,
duplicates detectable: "Spark's rules" 9).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa
from apache.rocketmq.v2 import definition_pb2 as d

from pipeline.errors import OptionError
from pipeline.schema import BROKER_COLUMNS, arrow_schema

_TYPE_NAMES = {value: name for name, value in d.MessageType.items()}


def _micros(ts) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def to_batch(broker: str, messages: list[d.Message]) -> pa.RecordBatch:
    topics, queue_ids, offsets, ids, tags, keys, bodies, props = [], [], [], [], [], [], [], []
    born, stored, born_hosts, store_hosts, types, groups, delivery, attempts = [], [], [], [], [], [], [], []
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


_ALLOWED = {
    "body": ("binary", "string"),
    "value": ("binary", "string"),
    "topic": ("string",),
    "tags": ("string",),
    "keys": ("array<string>", "string"),
    "properties": ("map<string,string>",),
    "messageGroup": ("string",),
    "deliveryTimestamp": ("timestamp",),
}


def sink_columns(schema, topic_option: str | None) -> SinkColumns:
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
    )


def message_id(*parts: object) -> str:
    """A deterministic 32-hex-digit id (the UNIQ_KEY form) from the row's coordinates."""
    return hashlib.md5("/".join(map(str, parts)).encode()).hexdigest().upper()


def to_messages(
    batch: pa.RecordBatch, columns: SinkColumns, topic_option: str | None, id_prefix: str, first_row: int
) -> list[tuple[tuple[str, str | None], d.Message]]:
    """((topic, message group), message) per row: a SendMessage carries one topic, and one
    message group so the broker keeps a group on its queue."""
    count = batch.num_rows
    get = lambda name: batch.column(name).to_pylist() if name else [None] * count  # noqa: E731
    bodies, topics, tags, keys = get(columns.body), get(columns.topic), get(columns.tags), get(columns.keys)
    props, groups, delivery = get(columns.properties), get(columns.message_group), get(columns.delivery_timestamp)
    out = []
    for i in range(count):
        body = bodies[i]
        if body is None:
            raise ValueError(f"rocketmq sink: row {first_row + i} has a null {columns.body}")
        topic = topic_option or topics[i]
        if not topic:
            raise ValueError(f"rocketmq sink: row {first_row + i} has no topic")
        sp = d.SystemProperties(message_id=message_id(id_prefix, first_row + i), body_encoding=d.IDENTITY)
        if tags[i]:
            sp.tag = tags[i]
        row_keys = keys[i]
        if row_keys:
            sp.keys.extend(row_keys.split() if isinstance(row_keys, str) else [k for k in row_keys if k])
        if groups[i] is not None and delivery[i] is not None:
            raise ValueError(f"rocketmq sink: row {first_row + i} has both messageGroup and deliveryTimestamp")
        if groups[i] is not None:
            sp.message_group = groups[i]
            sp.message_type = d.FIFO
        elif delivery[i] is not None:
            sp.delivery_timestamp.FromDatetime(delivery[i])
            sp.message_type = d.DELAY
        else:
            sp.message_type = d.NORMAL
        message = d.Message(
            topic=d.Resource(name=topic), system_properties=sp, body=body.encode() if isinstance(body, str) else body
        )
        if props[i]:
            message.user_properties.update(dict(props[i]))
        out.append(((topic, groups[i]), message))
    return out
