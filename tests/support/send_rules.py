"""The broker's send rules as a table: ``CASES``, one ``(id, IncomingMessage fields, expected
Code)`` per rule, at the manual clock's ``NOW_MS`` (``DAY_MS`` for delivery-time limits).
tests/broker/test_validation.py runs them on the core; test_bad_input_rpc.py sends the refused
ones over gRPC."""

from __future__ import annotations

from services.broker.errors import Code
from services.domain.delivery import MessageType

NOW_MS = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000


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
    ("129 user properties", {"user_properties": {f"k{i}": "v" for i in range(129)}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ("128 user properties", {"user_properties": {f"k{i}": "v" for i in range(128)}}, Code.OK),
    ("user properties over 16 KiB", {"user_properties": {"k": "v" * (16 * 1024)}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (
        "tag and keys count toward 16 KiB",
        {"user_properties": {"k": "v" * (16 * 1024 - 10)}, "tag": "t" * 10},
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
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
    (
        "tx recovery over 1 h",
        {"message_type": MessageType.TRANSACTION, "orphaned_transaction_recovery_s": 3601},
        Code.BAD_REQUEST,
    ),
    (
        "delivery 1 day ahead",
        {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS + DAY_MS},
        Code.OK,
    ),
    (
        "delivery over 1 day ahead",
        {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS + DAY_MS + 1},
        Code.ILLEGAL_DELIVERY_TIME,
    ),
    ("delivery in the past", {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS - 5}, Code.OK),
    (
        "delivery in ms passed as seconds",
        {"message_type": MessageType.DELAY, "delivery_timestamp_ms": NOW_MS * 1000},
        Code.ILLEGAL_DELIVERY_TIME,
    ),
    ("group blank", {"message_type": MessageType.FIFO, "message_group": " "}, Code.ILLEGAL_MESSAGE_GROUP),
    ("group 63 bytes", {"message_type": MessageType.FIFO, "message_group": "g" * 63}, Code.OK),
    ("group 64 bytes", {"message_type": MessageType.FIFO, "message_group": "g" * 64}, Code.ILLEGAL_MESSAGE_GROUP),
    ("group 64 UTF-8 bytes", {"message_type": MessageType.FIFO, "message_group": "é" * 32}, Code.ILLEGAL_MESSAGE_GROUP),
    ("group control", {"message_type": MessageType.FIFO, "message_group": "g\x00"}, Code.ILLEGAL_MESSAGE_GROUP),
    ("FIFO without group", {"message_type": MessageType.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (
        "NORMAL with group",
        {"message_type": MessageType.NORMAL, "message_group": "g"},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "unspecified type with group is FIFO",
        {"message_type": MessageType.MESSAGE_TYPE_UNSPECIFIED, "message_group": "g"},
        Code.OK,
    ),
    (
        "group and delivery time",
        {"message_type": MessageType.MESSAGE_TYPE_UNSPECIFIED, "message_group": "g", "delivery_timestamp_ms": NOW_MS},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "transaction with group",
        {"message_type": MessageType.TRANSACTION, "message_group": "g"},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    # lite messages (on the MIXED topic: RocketMQ's validator takes any type there)
    ("lite topic", {"message_type": MessageType.LITE, "lite_topic": "chat-1_A"}, Code.OK),
    ("lite topic 64 bytes", {"message_type": MessageType.LITE, "lite_topic": "x" * 64}, Code.OK),
    ("lite topic 65 bytes", {"message_type": MessageType.LITE, "lite_topic": "x" * 65}, Code.ILLEGAL_LITE_TOPIC),
    ("lite topic blank", {"message_type": MessageType.LITE, "lite_topic": " "}, Code.ILLEGAL_LITE_TOPIC),
    ("lite topic empty", {"message_type": MessageType.LITE, "lite_topic": ""}, Code.ILLEGAL_LITE_TOPIC),
    ("lite topic with a dollar", {"message_type": MessageType.LITE, "lite_topic": "a$b"}, Code.ILLEGAL_LITE_TOPIC),
    ("lite topic non-ASCII", {"message_type": MessageType.LITE, "lite_topic": "é"}, Code.ILLEGAL_LITE_TOPIC),
    ("lite topic stated NORMAL", {"lite_topic": "lt"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ("LITE without a lite topic", {"message_type": MessageType.LITE}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (
        "lite topic with a group",
        {"message_type": MessageType.LITE, "lite_topic": "lt", "message_group": "g"},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "lite topic with a priority",
        {"message_type": MessageType.LITE, "lite_topic": "lt", "priority": 1},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "transaction with a lite topic",
        {"message_type": MessageType.TRANSACTION, "lite_topic": "lt"},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    # priority on the MIXED topic: accepted, as RocketMQ's validator takes any type on MIXED
    ("priority", {"message_type": MessageType.PRIORITY, "priority": 1}, Code.OK),
    ("priority 0", {"message_type": MessageType.PRIORITY, "priority": 0}, Code.OK),
    ("priority type unspecified", {"message_type": MessageType.MESSAGE_TYPE_UNSPECIFIED, "priority": 7}, Code.OK),
    ("priority above the top level", {"message_type": MessageType.PRIORITY, "priority": 2**31 - 1}, Code.OK),
    ("priority negative", {"message_type": MessageType.PRIORITY, "priority": -1}, Code.BAD_REQUEST),
    ("PRIORITY without a priority", {"message_type": MessageType.PRIORITY}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (
        "PRIORITY with a group",
        {"message_type": MessageType.PRIORITY, "priority": 1, "message_group": "g"},
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    # a priority beside a group is dropped: FIFO (RocketMQ's broker strips it; the Py client sends it for priority 0)
    ("FIFO with a priority", {"message_type": MessageType.FIFO, "priority": 0, "message_group": "g"}, Code.OK),
    ("trace context control", {"trace_context": "00-ab\x01"}, Code.BAD_REQUEST),
]
