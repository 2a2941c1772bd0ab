"""The "rocketmq" sink's rows -> v2 Messages (pipeline/messages.py), without Spark or a broker:
each row is one message type, contradictory rows are refused before anything is sent, and the
send key keeps a message group or a lite topic in one SendMessage."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from tests.support.components import require

require("pyarrow", module_level=True)
import pyarrow as pa  # noqa: E402
from apache.rocketmq.v2 import definition_pb2 as d  # noqa: E402

from pipeline.errors import OptionError  # noqa: E402
from pipeline.messages import sink_columns, to_messages  # noqa: E402


def schema(**kinds: str):
    """What the sink reads of a Spark schema: each field's name and ``dataType.simpleString()``."""
    return SimpleNamespace(
        fields=[SimpleNamespace(name=n, dataType=SimpleNamespace(simpleString=lambda k=k: k)) for n, k in kinds.items()]
    )


SINK_SCHEMA = schema(
    topic="string",
    body="binary",
    messageGroup="string",
    deliveryTimestamp="timestamp",
    priority="bigint",
    liteTopic="string",
)
AT = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def messages(*rows: dict):
    columns = sink_columns(SINK_SCHEMA, None)
    names = ("topic", "body", "messageGroup", "deliveryTimestamp", "priority", "liteTopic")
    types = (pa.string(), pa.binary(), pa.string(), pa.timestamp("us", tz="UTC"), pa.int64(), pa.string())
    batch = pa.RecordBatch.from_arrays(
        [pa.array([row.get(n) for row in rows], t) for n, t in zip(names, types)], names=list(names)
    )
    return to_messages(batch, columns, None, "q/0/1", 10)


def test_each_row_is_one_message_type():
    out = messages(
        {"topic": "T", "body": b"n"},
        {"topic": "T", "body": b"f", "messageGroup": "g"},
        {"topic": "T", "body": b"d", "deliveryTimestamp": AT},
        {"topic": "P", "body": b"p", "priority": 0},
        {"topic": "P", "body": b"p9", "priority": 9},
        {"topic": "L", "body": b"l", "liteTopic": "chat-1"},
    )
    keys = [key for key, _ in out]
    assert keys == [("T", None, None), ("T", "g", None), ("T", None, None)] + [("P", None, None)] * 2 + [
        ("L", None, "chat-1")
    ]
    sp = [m.system_properties for _, m in out]
    assert [s.message_type for s in sp] == [d.NORMAL, d.FIFO, d.DELAY, d.PRIORITY, d.PRIORITY, d.LITE]
    assert sp[3].HasField("priority") and sp[3].priority == 0 and sp[4].priority == 9
    assert sp[5].lite_topic == "chat-1" and not sp[5].HasField("priority")
    assert not any(s.HasField("lite_topic") for s in sp[:5]) and not any(s.HasField("priority") for s in sp[:3])
    assert sp[2].delivery_timestamp.ToDatetime(dt.UTC) == AT
    assert len({s.message_id for s in sp}) == 6  # deterministic per row, distinct


@pytest.mark.parametrize(
    ("row", "both"),
    [
        ({"liteTopic": "a", "messageGroup": "g"}, "messageGroup and liteTopic"),
        ({"liteTopic": "a", "deliveryTimestamp": AT}, "deliveryTimestamp and liteTopic"),
        ({"liteTopic": "a", "priority": 1}, "priority and liteTopic"),
        ({"priority": 1, "messageGroup": "g"}, "messageGroup and priority"),
        ({"priority": 1, "deliveryTimestamp": AT}, "deliveryTimestamp and priority"),
        ({"messageGroup": "g", "deliveryTimestamp": AT}, "messageGroup and deliveryTimestamp"),
    ],
)
def test_contradictory_rows_are_refused(row, both):
    with pytest.raises(ValueError, match=f"row 11 has both {both}; a message has one type"):
        messages({"topic": "T", "body": b"ok"}, {"topic": "T", "body": b"x", **row})


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"priority": -1}, r"priority -1; a priority is 0 to 2147483647"),
        ({"priority": 2**31}, r"priority 2147483648; a priority is 0 to 2147483647"),
        ({"liteTopic": "no spaces"}, r"liteTopic 'no spaces': lite topic can only contain"),
        ({"liteTopic": ""}, r"liteTopic '': lite topic cannot be the char sequence of whitespace"),
        ({"liteTopic": "x" * 65}, r"lite topic exceed the max size 64"),
    ],
)
def test_values_the_broker_would_refuse_are_refused(row, why):
    with pytest.raises(ValueError, match=why):
        messages({"topic": "T", "body": b"x", **row})


def test_column_types():
    assert sink_columns(schema(topic="string", body="binary", priority="int"), None).priority == "priority"
    assert sink_columns(schema(topic="string", body="binary", liteTopic="string"), None).lite_topic == "liteTopic"
    with pytest.raises(OptionError, match="column 'priority' must be tinyint or smallint or int or bigint, not string"):
        sink_columns(schema(topic="string", body="binary", priority="string"), None)
    with pytest.raises(OptionError, match="column 'liteTopic' must be string, not int"):
        sink_columns(schema(topic="string", body="binary", liteTopic="int"), None)
    plain = sink_columns(schema(topic="string", body="binary"), None)
    assert plain.priority is None and plain.lite_topic is None
