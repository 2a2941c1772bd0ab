"""services.domain.contracts.transaction: half messages and op records."""

from __future__ import annotations

from services.domain.contracts.parking import real_destination
from services.domain.contracts.transaction import (
    Half,
    decode_op,
    encode_op,
    park_half,
    parse_op_body,
    read_half,
)
from services.domain.format.commitlog_format import MessageRecord, decode_record, encode_record
from services.domain.format.properties_format import encode_properties


def stored(topic: str, queue_id: int, body: bytes, properties: dict[str, str]) -> MessageRecord:
    """The record as the store gives it back: encoded into the CommitLog and decoded."""
    data = encode_record(MessageRecord(topic=topic, queue_id=queue_id, body=body, properties=properties))
    return decode_record(data, 0, len(data))


def test_half_park_then_commit_gives_back_the_message():
    original = {"UNIQ_KEY": "TX1", "TRAN_MSG": "true", "PGROUP": "Payments", "TAGS": "TagA"}
    properties = dict(original)
    topic, queue_id = park_half(properties, "Orders", 3, "TX1")
    assert (topic, queue_id) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0)
    assert properties == {**original, "__transactionId__": "TX1", "REAL_TOPIC": "Orders", "REAL_QID": "3"}
    record = stored(topic, queue_id, b"money", properties)
    assert read_half(record.properties) == Half(
        real_topic="Orders", transaction_id="TX1", message_id="TX1", producer_group="Payments"
    )
    # A commit goes to the real topic and queue, the properties kept as they are (as on a Java broker).
    assert real_destination(record.properties) == ("Orders", 3)
    assert record.body == b"money" and record.properties == properties


def test_half_properties_encode_as_rocketmq_writes_them():
    properties = {"UNIQ_KEY": "TX1", "TRAN_MSG": "true", "PGROUP": "Orders"}
    park_half(properties, "Orders", 3, "TX1")
    assert encode_properties(properties, java_order=True) == (
        b"UNIQ_KEY\x01TX1\x02PGROUP\x01Orders\x02__transactionId__\x01TX1\x02TRAN_MSG\x01true\x02"
        b"REAL_TOPIC\x01Orders\x02REAL_QID\x013\x02"
    )


def test_read_half_falls_back_and_refuses_what_is_no_half():
    # No __transactionId__ (a 4.x half): the UNIQ_KEY; no PGROUP: the real topic.
    assert read_half({"REAL_TOPIC": "Orders", "UNIQ_KEY": "U1"}) == Half("Orders", "U1", "U1", "Orders")
    # No UNIQ_KEY: the message id is the transaction id.
    assert read_half({"REAL_TOPIC": "Orders", "__transactionId__": "TX1"}) == Half("Orders", "TX1", "TX1", "Orders")
    assert read_half({"UNIQ_KEY": "U1", "__transactionId__": "TX1"}) is None  # no real topic
    assert read_half({"REAL_TOPIC": "Orders"}) is None  # no transaction id


def test_op_record_write_then_read_gives_back_the_offsets():
    properties, body = encode_op([4, 7, 12])
    record = stored("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, body, properties)
    assert decode_op(record.properties, record.body) == [4, 7, 12]


def test_op_record_is_rocketmqs():
    properties, body = encode_op([4, 7, 12])
    assert properties == {"WAIT": "true", "TAGS": "d"}  # TransactionalMessageUtil.REMOVE_TAG
    assert body == b"4,7,12,"  # RocketMQ 5: each offset followed by ","
    assert encode_properties(properties, java_order=True) == b"TAGS\x01d\x02WAIT\x01true\x02"


def test_op_bodies_of_every_rocketmq_version_are_read():
    assert parse_op_body(b"7") == [7]  # 4.x: one offset
    assert parse_op_body(b"1,2,30,") == [1, 2, 30]  # 5.x: batched
    assert parse_op_body(b",x,5,,-1, 6 ,") == [5, 6]  # garbage and empty pieces are skipped
    assert decode_op({"TAGS": "d"}, b"3,") == [3]
    assert decode_op({"TAGS": "other"}, b"3,") == []  # another tag: not an op record
    assert decode_op({}, b"3,") == []
