"""Every send-side rule -> its exact v2 code, through the producer core (FakeStore, no gRPC)."""
from __future__ import annotations

import dataclasses

import pytest

from services.broker import validation
from services.broker.clock import ManualClock
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code
from services.broker.model import IncomingMessage, MessageType, TopicInfo
from services.broker.producer import Producer
from services.broker.store_client import DirectPutSink
from services.broker.topics import TopicRegistry
from services.domain.format.properties_format import RESERVED_PROPERTY_KEYS

NOW_MS = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000


def producer(fake_store, **config) -> Producer:
    cfg = BrokerConfig(**config)
    clock = ManualClock(NOW_MS)
    return Producer(cfg, TopicRegistry(cfg, fake_store, clock), DirectPutSink(fake_store.put_messages), clock)


def message(**fields) -> IncomingMessage:
    values = dict(topic="TopicTest", body=b"hello", message_id="0102FC0000000146A20B13E20600000000",
                  message_type=MessageType.NORMAL)
    values.update(fields)
    return IncomingMessage(**values)


def code_of(fake_store, messages, **config) -> int:
    try:
        [receipt] = producer(fake_store, **config).send(messages, "127.0.0.1:50000", 3.0)
    except BrokerError as exc:
        return exc.code
    return receipt.code


CASES = [
    # (id, message fields, expected code)
    ("ok", {}, Code.OK),
    ("topic blank", {"topic": ""}, Code.ILLEGAL_TOPIC),
    ("topic bad chars", {"topic": "a b"}, Code.ILLEGAL_TOPIC),
    ("topic too long", {"topic": "t" * 128}, Code.ILLEGAL_TOPIC),
    ("topic 127 chars", {"topic": "t" * 127}, Code.OK),
    ("system topic", {"topic": "RMQ_SYS_TRANS_HALF_TOPIC"}, Code.ILLEGAL_TOPIC),
    ("system topic TBW102", {"topic": "TBW102"}, Code.ILLEGAL_TOPIC),
    ("system topic prefix", {"topic": "rmq_sys_wheel_timer"}, Code.ILLEGAL_TOPIC),
    ("body empty", {"body": b""}, Code.MESSAGE_BODY_EMPTY),
    ("body 4 MiB", {"body": b"x" * (4 << 20)}, Code.OK),
    ("body over 4 MiB", {"body": b"x" * ((4 << 20) + 1)}, Code.MESSAGE_BODY_TOO_LARGE),
    ("129 user properties", {"user_properties": {f"k{i}": "v" for i in range(129)}},
     Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ("128 user properties", {"user_properties": {f"k{i}": "v" for i in range(128)}}, Code.OK),
    ("user properties over 16 KiB", {"user_properties": {"k": "v" * (16 * 1024)}},
     Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ("tag and keys count toward 16 KiB", {"user_properties": {"k": "v" * (16 * 1024 - 10)}, "tag": "t" * 10},
     Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ("reserved key UNIQ_KEY", {"user_properties": {"UNIQ_KEY": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("reserved key __CRC32#", {"user_properties": {"__CRC32#": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("broker key __SHARDINGKEY", {"user_properties": {"__SHARDINGKEY": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("empty key", {"user_properties": {"": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("control char in key", {"user_properties": {"a\x01": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("control char in value", {"user_properties": {"a": "x\x02"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("C1 control char in value", {"user_properties": {"a": "x\x85"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ("tag whitespace", {"tag": "  "}, Code.ILLEGAL_MESSAGE_TAG),
    ("tag with |", {"tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG),
    ("tag control", {"tag": "a\tb"}, Code.ILLEGAL_MESSAGE_TAG),
    ("tag empty is no tag", {"tag": ""}, Code.OK),
    ("tag non-breaking space is not blank", {"tag": "\u00a0"}, Code.OK),
    ("key whitespace", {"keys": ["ok", " "]}, Code.ILLEGAL_MESSAGE_KEY),
    ("key control", {"keys": ["a\nb"]}, Code.ILLEGAL_MESSAGE_KEY),
    ("message id empty", {"message_id": ""}, Code.ILLEGAL_MESSAGE_ID),
    ("message id blank", {"message_id": "   "}, Code.ILLEGAL_MESSAGE_ID),
    ("message id control", {"message_id": "AB\x01"}, Code.ILLEGAL_MESSAGE_ID),
    ("message id opaque legacy", {"message_id": "7F0000010C8B18B4AAC2765E5E0A0000"}, Code.OK),
    ("tx recovery 1 h", {"message_type": MessageType.TRANSACTION, "orphaned_transaction_recovery_s": 3600}, Code.OK),
    ("tx recovery over 1 h", {"message_type": MessageType.TRANSACTION, "orphaned_transaction_recovery_s": 3601},
     Code.BAD_REQUEST),
    ("delivery 30 days ahead", {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS + 30 * DAY_MS},
     Code.OK),
    ("delivery over 30 days ahead", {"message_type": MessageType.DELAY,
                                     "delivery_timestamp_ms": NOW_MS + 30 * DAY_MS + 1},
     Code.ILLEGAL_DELIVERY_TIME),
    ("delivery in the past", {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS - 5}, Code.OK),
    ("delivery in ms passed as seconds", {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS * 1000},
     Code.ILLEGAL_DELIVERY_TIME),
    ("group blank", {"message_type": MessageType.FIFO, "message_group": " "}, Code.ILLEGAL_MESSAGE_GROUP),
    ("group 63 bytes", {"message_type": MessageType.FIFO, "message_group": "g" * 63}, Code.OK),
    ("group 64 bytes", {"message_type": MessageType.FIFO, "message_group": "g" * 64}, Code.ILLEGAL_MESSAGE_GROUP),
    ("group 64 UTF-8 bytes", {"message_type": MessageType.FIFO, "message_group": "é" * 32},
     Code.ILLEGAL_MESSAGE_GROUP),
    ("group control", {"message_type": MessageType.FIFO, "message_group": "g\x00"}, Code.ILLEGAL_MESSAGE_GROUP),
    ("FIFO without group", {"message_type": MessageType.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ("NORMAL with group", {"message_type": MessageType.NORMAL, "message_group": "g"},
     Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ("unspecified type with group is FIFO", {"message_type": MessageType.MESSAGE_TYPE_UNSPECIFIED,
                                             "message_group": "g"}, Code.OK),
    ("group and delivery time", {"message_type": MessageType.MESSAGE_TYPE_UNSPECIFIED, "message_group": "g",
                                 "delivery_timestamp_ms": NOW_MS}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ("transaction with group", {"message_type": MessageType.TRANSACTION, "message_group": "g"},
     Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ("lite topic", {"lite_topic": "lt"}, Code.UNSUPPORTED),
    ("priority", {"message_type": MessageType.PRIORITY, "priority": 1}, Code.UNSUPPORTED),
    ("trace context control", {"trace_context": "00-ab\x01"}, Code.BAD_REQUEST),
]


@pytest.mark.parametrize("fields,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_send_rule_gives_exact_code(fake_store, fields, expected):
    assert code_of(fake_store, [message(**fields)]) == expected
    assert len(fake_store.put_messages_sent) == (1 if expected == Code.OK else 0)  # refused: nothing written


def test_empty_message_list_is_message_corrupted(fake_store):
    assert code_of(fake_store, []) == Code.MESSAGE_CORRUPTED


def test_messages_of_different_topics_are_message_corrupted(fake_store):
    p = producer(fake_store)
    with pytest.raises(BrokerError) as caught:
        p.send([message(), message(topic="Other")], "", 3.0)
    assert caught.value.code == Code.MESSAGE_CORRUPTED
    with pytest.raises(BrokerError) as caught:
        p.send([message(), message(topic_namespace="ns")], "", 3.0)
    assert caught.value.code == Code.MESSAGE_CORRUPTED


def test_rules_run_before_the_topic_lookup(fake_store):
    # A bad tag on an unknown topic with auto-create off reports the tag, as the proxy does.
    assert code_of(fake_store, [message(tag="a|b")], auto_create_topic_enable=False) == Code.ILLEGAL_MESSAGE_TAG
    assert code_of(fake_store, [message()], auto_create_topic_enable=False) == Code.TOPIC_NOT_FOUND


@pytest.mark.parametrize("topic_type,sent,expected", [
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
])
def test_topic_message_type_check(fake_store, topic_type, sent, expected):
    fake_store.topics["TopicTest"] = TopicInfo("TopicTest", 8, 8, 6, topic_type)
    assert code_of(fake_store, [message(**sent)]) == expected


def test_unwritable_topic_is_forbidden(fake_store):
    fake_store.topics["TopicTest"] = TopicInfo("TopicTest", 8, 8, 4, "NORMAL")
    assert code_of(fake_store, [message()]) == Code.FORBIDDEN


def test_limits_follow_the_config(fake_store):
    assert code_of(fake_store, [message(body=b"x" * 11)], body_size_max_bytes=10, put_batch_bytes_max=1 << 20,
                   grpc_message_size_max_bytes=2 << 20) == Code.MESSAGE_BODY_TOO_LARGE
    assert code_of(fake_store, [message(message_group="abcd", message_type=MessageType.FIFO)],
                   message_group_size_max_bytes=4) == Code.ILLEGAL_MESSAGE_GROUP


def test_properties_string_beyond_the_store_limit_is_refused_before_the_store(fake_store):
    # 16 KiB of user properties is fine, but a huge trace context must not sink a store batch.
    assert code_of(fake_store, [message(trace_context="t" * 40_000)]) == Code.MESSAGE_PROPERTIES_TOO_LARGE
    assert fake_store.calls == []


def test_java_blank_and_control_definitions():
    assert validation.is_blank("") and validation.is_blank(" \t\n\x0b\x0c\r\x1c\u2003")
    assert not validation.is_blank("\u00a0") and not validation.is_blank(" a ")
    assert all(validation.has_control_character(chr(c)) for c in [*range(0x20), *range(0x7F, 0xA0)])
    assert not any(validation.has_control_character(chr(c)) for c in [0x20, 0x7E, 0xA0, 0x4E2D])


def test_reserved_keys_are_rocketmqs():
    assert {"KEYS", "TAGS", "UNIQ_KEY", "TIMER_DELIVER_MS", "__BORNHOST", "CLUSTER", "PGROUP",
            "__CRC32#"} <= RESERVED_PROPERTY_KEYS
    # A user property merely *named* like a v2 field is fine.
    assert "tag" not in RESERVED_PROPERTY_KEYS


def test_every_case_id_is_unique():
    assert len({c[0] for c in CASES}) == len(CASES)
    assert dataclasses.is_dataclass(IncomingMessage)
