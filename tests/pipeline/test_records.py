"""Raw records (PullRecords) -> the "rocketmq" source's columns, against the v2 PullMessage path.

No Spark. The same CommitLog records go both ways: ``pipeline.records.records_to_batch`` on their
bytes, and the broker's own v2 conversion (the store's decoded Message -> Delivery ->
``consumer_convert.delivered_message`` -> ``pipeline.messages.to_batch``); the batches must be equal.
"""

from __future__ import annotations

import random

import pytest

from tests.support.components import require

require("pyarrow", module_level=True)
import pyarrow as pa  # noqa: E402

from pipeline.errors import TruncatedRecords  # noqa: E402
from pipeline.messages import to_batch  # noqa: E402
from pipeline.records import records_to_batch  # noqa: E402
from services.broker.pull import pulled_delivery  # noqa: E402
from services.broker.v2.consumer_convert import delivered_message  # noqa: E402
from services.domain.format.commitlog_format import (  # noqa: E402
    MessageRecord,
    decode_record,
    encode_record,
    fill_prop_crc,
    host_from_string,
)
from services.domain.format.properties_format import INNER_MULTI_QUEUE_OFFSET, PRIORITY  # noqa: E402
from services.domain.lite import LMQ_OFFSET_DIGITS, lite_properties  # noqa: E402
from services.store.client.convert import stored_from_pb  # noqa: E402
from services.store.rpc.convert import message_to_pb  # noqa: E402

BROKER = "broker-a"


def record(i: int, rng: random.Random) -> MessageRecord:
    props = {"CLUSTER": "DefaultCluster", "n": str(i), "color": rng.choice(["red", "blue"])}
    if rng.random() < 0.8:
        props["UNIQ_KEY"] = f"ID{i:030d}"
    if rng.random() < 0.7:
        props["TAGS"] = rng.choice(["TagA", "TagB"])
    if rng.random() < 0.5:
        props["KEYS"] = rng.choice(["k1", "k1 k2", " k3  k4 "])
    kind = rng.choice(
        ["normal", "normal", "fifo", "delay", "timer-sec", "transaction", "bornhost", "bad-timer"]
        + ["lite", "lite", "priority", "priority", "bad-priority", "lite-fifo", "priority-delay", "lite-priority"]
        + ["lite-not-transaction"]
    )
    if kind.startswith("lite"):  # as the store writes a lite message (services/domain/lite.py)
        lite_properties(props, "RecTopic", f"chat-{i % 4}")
        props[INNER_MULTI_QUEUE_OFFSET] = f"{i:0{LMQ_OFFSET_DIGITS}d}"
    if kind.startswith("priority") or kind == "lite-priority":
        props[PRIORITY] = str(rng.choice([0, 3, 9, 12]))
    if kind == "bad-priority":
        props[PRIORITY] = rng.choice(["-1", "high", ""])
    elif kind == "lite-fifo":
        props["__SHARDINGKEY"] = "group-x"
    elif kind == "priority-delay":
        props["TIMER_DELIVER_MS"] = str(1_800_000_000_000 + i)
    elif kind == "lite-not-transaction":  # TRAN_MSG=false: worked out row by row, still LITE
        props["TRAN_MSG"] = "false"
    if kind == "fifo":
        props["__SHARDINGKEY"] = f"group-{i % 3}"
    elif kind == "delay":
        props["TIMER_DELIVER_MS"] = str(1_800_000_000_000 + i)
    elif kind == "timer-sec":
        props["TIMER_DELAY_SEC"] = "30"
    elif kind == "bad-timer":
        props["TIMER_DELIVER_MS"] = "soon"
        props["TIMER_DELAY_SEC"] = "7"
    elif kind == "transaction":
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = "producers"
    elif kind == "bornhost":
        props["__BORNHOST"] = "10.1.2.3:4567"
    return MessageRecord(
        topic="RecTopic",
        queue_id=3,
        body=bytes(rng.randrange(256) for _ in range(rng.randrange(40))),
        properties=props,
        flag=i,
        sys_flag=rng.choice([0, 0, 1]),
        born_timestamp_ms=1_700_000_000_000 + i,
        born_host=host_from_string(rng.choice(["127.0.0.1:5000", "[::1]:7"])),
        store_timestamp_ms=1_700_000_000_500 + i,
        store_host=host_from_string(rng.choice(["10.0.0.9:10911", "[fe80::2]:10911"])),
        reconsume_times=rng.choice([0, 0, 2]),
        queue_offset=100 + i,
        phy_offset=4096 * i,
    )


def encode(records: list[MessageRecord], rng: random.Random) -> bytes:
    out = bytearray()
    for rec in records:
        raw = bytearray(encode_record(rec, prop_crc=rng.random() < 0.5))
        if raw[-20:-11] == b"__CRC32#\x01":
            fill_prop_crc(raw, 0, len(raw))
        out += raw
    return bytes(out)


def via_v2(data: bytes) -> pa.RecordBatch:
    messages, pos = [], 0
    while pos < len(data):
        rec = decode_record(data, pos, len(data))
        pos += rec.total_size
        message = delivered_message(pulled_delivery(stored_from_pb(message_to_pb(rec))))
        message.system_properties.ClearField("receipt_handle")
        messages.append(message)
    return to_batch(BROKER, messages)


@pytest.mark.parametrize("seed", range(6))
def test_records_give_the_columns_the_v2_path_gives(seed):
    rng = random.Random(seed)
    records = [record(i, rng) for i in range(rng.randrange(1, 60))]
    data = encode(records, rng)
    got = records_to_batch(BROKER, data, "RecTopic/3", expected=len(records))
    want = via_v2(data)
    assert got.schema == want.schema
    got_rows, want_rows = got.to_pylist(), want.to_pylist()
    for got_row, want_row in zip(got_rows, want_rows):
        got_row["properties"] = sorted(got_row["properties"])
        want_row["properties"] = sorted(want_row["properties"])
        assert got_row == want_row
    assert len(got_rows) == len(want_rows) == len(records)
    assert got.column("liteTopic").null_count == sum(r["messageType"] != "LITE" for r in got_rows)


def test_lite_and_priority_rows():
    """The cases by name: what the broker's delivered message says, column by column."""
    rng = random.Random(3)
    lite_props: dict[str, str] = {"UNIQ_KEY": "L0", "k": "v"}
    lite_properties(lite_props, "T", "chat-1")
    lite_props[INNER_MULTI_QUEUE_OFFSET] = f"{5:0{LMQ_OFFSET_DIGITS}d}"
    cases = [
        (lite_props, "LITE", "chat-1", None),
        ({PRIORITY: "7"}, "PRIORITY", None, 7),
        ({PRIORITY: "7", "__LITE_TOPIC": "chat-2"}, "PRIORITY", None, 7),  # priority comes first
        ({PRIORITY: "7", "__SHARDINGKEY": "g"}, "FIFO", None, None),
        ({PRIORITY: "-3"}, "PRIORITY", None, None),  # no priority the broker would state
        ({PRIORITY: str(2**31)}, "PRIORITY", None, None),  # past the v2 field's int32
        ({"__LITE_TOPIC": "chat-3", "TIMER_DELAY_SEC": "5"}, "DELAY", None, None),
        ({"k": "v"}, "NORMAL", None, None),
    ]
    records = [
        MessageRecord(topic="T", queue_id=0, body=b"", properties=props, queue_offset=i)
        for i, (props, *_) in enumerate(cases)
    ]
    batch = records_to_batch(BROKER, encode(records, rng), "T/0", expected=len(cases))
    got = list(zip(*(batch.column(c).to_pylist() for c in ("messageType", "liteTopic", "priority"))))
    assert got == [tuple(case[1:]) for case in cases]
    assert batch.column("properties").to_pylist()[0] == [("k", "v")]  # the lite keys are the broker's
    assert batch.schema.field("priority").type == pa.int32()


def test_plain_records_and_bad_input():
    rng = random.Random(7)
    records = [
        MessageRecord(
            topic="T", queue_id=0, body=b"b%d" % i, properties={"UNIQ_KEY": f"U{i}", "k": "v"}, queue_offset=i
        )
        for i in range(5)
    ]
    data = encode(records, rng)
    batch = records_to_batch(BROKER, data, "T/0")
    assert batch.column("messageId").to_pylist() == [f"U{i}" for i in range(5)]
    assert batch.column("properties").to_pylist() == [[("k", "v")]] * 5
    assert batch.column("messageType").to_pylist() == ["NORMAL"] * 5
    assert records_to_batch(BROKER, b"", "T/0").num_rows == 0
    with pytest.raises(TruncatedRecords):
        records_to_batch(BROKER, data[:-3], "T/0")
    with pytest.raises(TruncatedRecords):
        records_to_batch(BROKER, data, "T/0", expected=4)
