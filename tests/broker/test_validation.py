"""Every send-side rule -> its exact v2 code, through the producer core on the in-process store (no servers)."""

from __future__ import annotations

import dataclasses

import pytest

from services.broker import validation
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code
from services.broker.model import IncomingMessage
from services.broker.producer import Producer
from services.broker.put_coalescer import DirectPutSink
from services.broker.topics import TopicRegistry
from services.domain.delivery import MessageType
from services.domain.format.properties_format import RESERVED_PROPERTY_KEYS
from services.runtime.clock import ManualClock
from services.store.client.model import TopicInfo
from tests.support.send_rules import CASES, DAY_MS, NOW_MS
from tests.support.topics import create_topics


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


def producer(store_client, **config) -> Producer:
    cfg = BrokerConfig(**config)
    return Producer(
        cfg,
        TopicRegistry(cfg, store_client, store_client.clock),
        DirectPutSink(store_client.put_messages),
        store_client.clock,
    )


def message(**fields) -> IncomingMessage:
    values = dict(
        topic="TopicTest",
        body=b"hello",
        message_id="0102FC0000000146A20B13E20600000000",
        message_type=MessageType.NORMAL,
    )
    values.update(fields)
    return IncomingMessage(**values)


def code_of(store_client, messages, **config) -> int:
    try:
        [receipt] = producer(store_client, **config).send(messages, "127.0.0.1:50000", 3.0)
    except BrokerError as exc:
        return exc.code
    return receipt.code


@pytest.fixture
def topic_test(store_client) -> None:
    """The topic the messages go to: MIXED, 8 queues."""
    create_topics(store_client, "TopicTest")


@pytest.mark.parametrize("fields,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_send_rule_gives_exact_code(store_client, topic_test, fields, expected):
    if expected == Code.OK and "topic" in fields:
        create_topics(store_client, fields["topic"])
    assert code_of(store_client, [message(**fields)]) == expected
    if expected != Code.OK:
        assert store_client.puts == []  # refused before the store: nothing sent, nothing written
        return
    [sent] = store_client.sent
    assert [m.body for m in store_client.messages(sent.topic)] == [sent.body]


def test_empty_message_list_is_message_corrupted(store_client):
    assert code_of(store_client, []) == Code.MESSAGE_CORRUPTED


def test_messages_of_different_topics_are_message_corrupted(store_client):
    p = producer(store_client)
    with pytest.raises(BrokerError) as caught:
        p.send([message(), message(topic="Other")], "", 3.0)
    assert caught.value.code == Code.MESSAGE_CORRUPTED
    with pytest.raises(BrokerError) as caught:
        p.send([message(), message(topic_namespace="ns")], "", 3.0)
    assert caught.value.code == Code.MESSAGE_CORRUPTED


def test_rules_run_before_the_topic_lookup(store_client):
    # A bad tag on an unknown topic reports the tag, as the proxy does.
    assert code_of(store_client, [message(tag="a|b")]) == Code.ILLEGAL_MESSAGE_TAG
    assert code_of(store_client, [message()]) == Code.TOPIC_NOT_FOUND


@pytest.mark.parametrize(
    "topic_type,sent,expected",
    [
        ("NORMAL", {}, Code.OK),
        ("NORMAL", {"message_group": "g", "message_type": MessageType.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ("FIFO", {}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ("FIFO", {"message_group": "g", "message_type": MessageType.FIFO}, Code.OK),
        ("DELAY", {"delivery_timestamp_ms": NOW_MS + 5000, "message_type": MessageType.DELAY}, Code.OK),
        ("TRANSACTION", {}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ("TRANSACTION", {"message_type": MessageType.TRANSACTION}, Code.OK),
        ("MIXED", {"message_type": MessageType.TRANSACTION}, Code.OK),
        ("MIXED", {"message_group": "g", "message_type": MessageType.FIFO}, Code.OK),
        ("MIXED", {"delivery_timestamp_ms": NOW_MS + 5000, "message_type": MessageType.DELAY}, Code.OK),
    ],
)
def test_topic_message_type_check(store_client, topic_type, sent, expected):
    store_client.create_topic(TopicInfo("TopicTest", 8, 8, 6, topic_type))
    assert code_of(store_client, [message(**sent)]) == expected


def test_unwritable_topic_is_forbidden(store_client):
    store_client.create_topic(TopicInfo("TopicTest", 8, 8, 4, "NORMAL"))
    assert code_of(store_client, [message()]) == Code.FORBIDDEN


def test_the_longest_delivery_delay_is_a_day_unless_configured(store_client, topic_test):
    # The proxy's maxDelayTimeMills: 1 day, and ILLEGAL_DELIVERY_TIME (40012) beyond, with its words.
    far = message(message_type=MessageType.DELAY, delivery_timestamp_ms=NOW_MS + 30 * DAY_MS)
    with pytest.raises(BrokerError) as caught:
        producer(store_client).send([far], "127.0.0.1:50000", 3.0)
    assert caught.value.code == Code.ILLEGAL_DELIVERY_TIME == 40012
    assert caught.value.message == "the max delay time of message is too large, max is 86400000"
    assert code_of(store_client, [far], delivery_delay_max_ms=30 * DAY_MS) == Code.OK


def test_limits_follow_the_config(store_client):
    assert (
        code_of(
            store_client,
            [message(body=b"x" * 11)],
            body_size_max_bytes=10,
            put_batch_bytes_max=1 << 20,
            grpc_message_size_max_bytes=2 << 20,
        )
        == Code.MESSAGE_BODY_TOO_LARGE
    )
    assert (
        code_of(
            store_client, [message(message_group="abcd", message_type=MessageType.FIFO)], message_group_size_max_bytes=4
        )
        == Code.ILLEGAL_MESSAGE_GROUP
    )


def test_properties_string_beyond_the_store_limit_is_refused_before_the_store(store_client):
    # 16 KiB of user properties is fine, but a huge trace context must not sink a store batch.
    assert code_of(store_client, [message(trace_context="t" * 40_000)]) == Code.MESSAGE_PROPERTIES_TOO_LARGE
    assert store_client.puts == []


def test_java_blank_and_control_definitions():
    assert validation.is_blank("") and validation.is_blank(" \t\n\x0b\x0c\r\x1c\u2003")
    assert not validation.is_blank("\u00a0") and not validation.is_blank(" a ")
    assert all(validation.has_control_character(chr(c)) for c in [*range(0x20), *range(0x7F, 0xA0)])
    assert not any(validation.has_control_character(chr(c)) for c in [0x20, 0x7E, 0xA0, 0x4E2D])


def test_reserved_keys_are_rocketmqs():
    assert {
        "KEYS",
        "TAGS",
        "UNIQ_KEY",
        "TIMER_DELIVER_MS",
        "__BORNHOST",
        "CLUSTER",
        "PGROUP",
        "__CRC32#",
    } <= RESERVED_PROPERTY_KEYS
    # A user property merely *named* like a v2 field is fine.
    assert "tag" not in RESERVED_PROPERTY_KEYS


def test_every_case_id_is_unique():
    assert len({c[0] for c in CASES}) == len(CASES)
    assert dataclasses.is_dataclass(IncomingMessage)
