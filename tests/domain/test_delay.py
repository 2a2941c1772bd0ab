"""services.domain.contracts.delay: parking delay-level and timer messages, and delivering them."""

from __future__ import annotations

import pytest

from services.domain.contracts.delay import (
    delete_key,
    delete_key_of,
    delivery_time_ms,
    level_delay_ms,
    park_delay_level,
    park_timer,
    roll_timer,
    timer_out_ms,
    unpark_delay_level,
    unpark_timer,
)
from services.domain.contracts.parking import real_destination
from services.domain.format.commitlog_format import MessageRecord, decode_record, encode_record
from services.domain.format.properties_format import encode_properties

LEVELS_MS = (1_000, 5_000, 10_000)


def stored(topic: str, queue_id: int, body: bytes, properties: dict[str, str]) -> MessageRecord:
    """The record as the store gives it back: encoded into the CommitLog and decoded."""
    data = encode_record(MessageRecord(topic=topic, queue_id=queue_id, body=body, properties=properties))
    return decode_record(data, 0, len(data))


def test_delay_level_park_then_unpark_gives_back_the_message():
    original = {"UNIQ_KEY": "ID1", "TAGS": "TagA", "KEYS": "k1 k2"}
    properties = dict(original)
    topic, queue_id = park_delay_level(properties, "Orders", 3, level=2)
    assert (topic, queue_id) == ("SCHEDULE_TOPIC_XXXX", 1)
    assert properties == {**original, "DELAY": "2", "REAL_TOPIC": "Orders", "REAL_QID": "3"}
    record = stored(topic, queue_id, b"payload", properties)
    assert unpark_delay_level(record.properties) == ("Orders", 3)
    assert record.body == b"payload"
    # Delivered with the properties unchanged: the parking ones stay, as on a Java broker.
    assert record.properties == properties


def test_delay_level_properties_encode_as_rocketmq_writes_them():
    properties = {"UNIQ_KEY": "ID1"}
    park_delay_level(properties, "Orders", 3, level=3)
    assert encode_properties(properties, java_order=True) == (
        b"UNIQ_KEY\x01ID1\x02DELAY\x013\x02REAL_TOPIC\x01Orders\x02REAL_QID\x013\x02"
    )


@pytest.mark.parametrize(
    "delay, expected",
    [
        ("1", 1_000),
        ("3", 10_000),
        ("18", 10_000),  # beyond the last level: the last
        ("0", None),
        ("-2", None),
        ("x", None),
        (None, None),
    ],
)
def test_level_delay_ms(delay, expected):
    properties = {} if delay is None else {"DELAY": delay}
    assert level_delay_ms(properties, LEVELS_MS) == expected


def test_delay_level_without_a_deliverable_real_destination_is_not_delivered():
    assert unpark_delay_level({"DELAY": "1"}) is None
    assert unpark_delay_level({"REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"}) is None
    assert unpark_delay_level({"REAL_TOPIC": "Orders", "REAL_QID": "-1"}) is None
    assert unpark_delay_level({"REAL_TOPIC": "Orders", "REAL_QID": "q"}) is None


def test_timer_tick_is_rocketmqs():
    assert timer_out_ms(5_000, 1_000) == 4_000  # on a tick: one tick earlier
    assert timer_out_ms(5_001, 1_000) == 5_000
    assert timer_out_ms(5_999, 1_000) == 5_000


def test_timer_park_then_unpark_gives_back_the_message():
    original = {"UNIQ_KEY": "ID1", "TIMER_DELIVER_MS": "5500", "TAGS": "TagA"}
    properties = dict(original)
    topic, queue_id = park_timer(properties, "Orders", 3, timer_out_ms(5_500, 1_000))
    assert (topic, queue_id) == ("rmq_sys_wheel_timer", 0)
    assert properties == {**original, "TIMER_OUT_MS": "5000", "REAL_TOPIC": "Orders", "REAL_QID": "3"}
    record = stored(topic, queue_id, b"payload", properties)
    assert delivery_time_ms(record.properties, 1_000) == 5_500
    delivered = dict(record.properties)
    assert unpark_timer(delivered, 4_000, 5_501) == ("Orders", 3)
    assert record.body == b"payload"
    assert delivered == {**properties, "TIMER_ENQUEUE_MS": "4000", "TIMER_DEQUEUE_MS": "5501"}


def test_timer_properties_encode_as_rocketmq_writes_them():
    properties = {"UNIQ_KEY": "ID1", "TIMER_DELIVER_MS": "5500"}
    park_timer(properties, "Orders", 3, 5_000)
    assert encode_properties(properties, java_order=True) == (
        b"TIMER_OUT_MS\x015000\x02TIMER_DELIVER_MS\x015500\x02UNIQ_KEY\x01ID1\x02"
        b"REAL_TOPIC\x01Orders\x02REAL_QID\x013\x02"
    )


@pytest.mark.parametrize(
    "properties, expected",
    [
        ({"TIMER_OUT_MS": "5000", "TIMER_DELIVER_MS": "5500"}, 5_500),
        ({"TIMER_OUT_MS": "5000", "TIMER_DELIVER_MS": "6000"}, 6_000),  # the end of the tick still agrees
        ({"TIMER_OUT_MS": "5000", "TIMER_DELIVER_MS": "9000"}, 6_000),  # disagrees: the end of the tick
        ({"TIMER_OUT_MS": "5000", "TIMER_DELIVER_MS": "5000"}, 6_000),
        ({"TIMER_OUT_MS": "5000"}, 6_000),
        ({"TIMER_DELIVER_MS": "5500"}, 5_500),
        ({}, None),
        ({"TIMER_OUT_MS": "x", "TIMER_DELIVER_MS": "5500"}, None),
    ],
)
def test_delivery_time_ms(properties, expected):
    assert delivery_time_ms(properties, 1_000) == expected


def test_a_roll_goes_back_into_the_wheel_counting_its_rolls():
    properties = {"REAL_TOPIC": "Orders", "REAL_QID": "3", "TIMER_OUT_MS": "5000"}
    assert roll_timer(properties, 100, 200) == ("rmq_sys_wheel_timer", 0)
    assert properties["TIMER_ROLL_TIMES"] == "1"
    assert (properties["TIMER_ENQUEUE_MS"], properties["TIMER_DEQUEUE_MS"]) == ("100", "200")
    assert roll_timer(properties, 300, 400) == ("rmq_sys_wheel_timer", 0)
    assert properties["TIMER_ROLL_TIMES"] == "2"
    properties["TIMER_ROLL_TIMES"] = "garbage"
    roll_timer(properties, 300, 400)
    assert properties["TIMER_ROLL_TIMES"] == "1"
    assert real_destination(properties) == ("Orders", 3)


def test_a_timer_message_without_its_real_destination_is_not_delivered():
    properties = {"TIMER_OUT_MS": "5000"}
    assert unpark_timer(properties, 1, 2) is None


def test_recall_marker_key_names_the_parked_message():
    assert delete_key("Orders", "ID1") == "Orders+ID1"
    parked = {"UNIQ_KEY": "ID1"}
    park_timer(parked, "Orders", 3, 5_000)
    assert delete_key_of(parked) == delete_key("Orders", "ID1")
    assert delete_key_of({"UNIQ_KEY": "ID1"}) is None
    assert delete_key_of({"REAL_TOPIC": "Orders"}) is None
