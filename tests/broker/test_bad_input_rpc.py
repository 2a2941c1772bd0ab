"""Bad input over the wire: every refusal is an in-band status with the protocol's exact code,
and the store is left untouched (its put counter does not move).

The core's full send-rule table is tests/broker/test_validation.py; here the same rules go
through real gRPC (protobuf conversion included) to a real store, plus the consumer-side and
transaction rules.
"""

from __future__ import annotations

import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.delivery import MessageType
from tests.support.send_rules import CASES, NOW_MS
from tests.support.v2_requests import METADATA, message, receive, send

# Wire-only cases on top of the core table: what protobuf conversion must get right.
WIRE_CASES = [
    ("no messages", [], d.MESSAGE_CORRUPTED),
    ("two topics in one request", [message("TopicA"), message("TopicB", message_id="ID2")], d.MESSAGE_CORRUPTED),
]


def to_proto(fields: dict) -> d.Message:
    """A core-table case (IncomingMessage fields) as the client would send it."""
    fields = dict(fields)
    system: dict = {}
    for name in ("tag", "message_group", "trace_context", "lite_topic", "priority"):
        if name in fields:
            system[name] = fields.pop(name)
    if "keys" in fields:
        system["keys"] = fields.pop("keys")
    if "message_type" in fields:
        system["message_type"] = int(fields.pop("message_type"))
    if "delivery_timestamp_ms" in fields:
        ms = fields.pop("delivery_timestamp_ms")
        system["delivery_timestamp"] = Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)
    if "orphaned_transaction_recovery_s" in fields:
        system["orphaned_transaction_recovery_duration"] = Duration(
            seconds=fields.pop("orphaned_transaction_recovery_s")
        )
    return message(
        topic=fields.pop("topic", "TopicTest"),
        body=fields.pop("body", b"hello"),
        message_id=fields.pop("message_id", "0102FC0000000146A20B13E20600000000"),
        user_properties=fields.pop("user_properties", None),
        **system,
    )


def puts(store_stub) -> int:
    return store_stub.GetStats(pb.GetStatsRequest(), timeout=10).put_messages_total


# The core table's refusals whose fields do not depend on the test clock (delivery times do).
SEND_CASES = [c for c in CASES if c[2] != d.OK and "delivery_timestamp_ms" not in c[1]]


@pytest.mark.parametrize("fields,expected", [c[1:] for c in SEND_CASES], ids=[c[0] for c in SEND_CASES])
def test_send_refusals_over_grpc_write_nothing(v2, store_stub, fields, expected):
    before = puts(store_stub)
    response = send(v2, to_proto(fields))
    assert response.status.code == expected, response.status
    assert [e.status.code for e in response.entries] in ([], [expected])
    assert puts(store_stub) == before


@pytest.mark.parametrize("messages,expected", [c[1:] for c in WIRE_CASES], ids=[c[0] for c in WIRE_CASES])
def test_wire_refusals_write_nothing(v2, store_stub, messages, expected):
    before = puts(store_stub)
    assert send(v2, *messages).status.code == expected
    assert puts(store_stub) == before


def test_delivery_time_too_far_ahead_writes_nothing(v2, store_stub):
    before = puts(store_stub)
    far = NOW_MS * 10  # year ~2500
    response = send(v2, to_proto({"message_type": MessageType.DELAY, "delivery_timestamp_ms": far}))
    assert response.status.code == d.ILLEGAL_DELIVERY_TIME
    assert puts(store_stub) == before


def test_missing_client_id_is_refused_everywhere(v2, store_stub):
    before = puts(store_stub)
    assert send(v2, message(), metadata=()).status.code == d.CLIENT_ID_REQUIRED
    route = v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="TopicTest")), timeout=10)
    assert route.status.code == d.CLIENT_ID_REQUIRED
    assert puts(store_stub) == before


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"group": "bad group!"}, d.ILLEGAL_CONSUMER_GROUP),
        ({"group": "CID_RMQ_SYS_TRANS"}, d.ILLEGAL_CONSUMER_GROUP),
        ({"topic": "bad topic!"}, d.ILLEGAL_TOPIC),
        ({"expression": "||"}, d.ILLEGAL_FILTER_EXPRESSION),
        ({"expression": "a > ", "filter_type": d.SQL}, d.ILLEGAL_FILTER_EXPRESSION),
        ({"invisible_s": 0}, d.ILLEGAL_INVISIBLE_TIME),
        ({"invisible_s": 13 * 3600}, d.ILLEGAL_INVISIBLE_TIME),
    ],
    ids=["group", "system group", "topic", "tag expression", "sql expression", "invisible 0", "invisible 13 h"],
)
def test_receive_refusals(v2, store_stub, topics, overrides, expected):
    topics("RecvTopic")  # an existing topic: each refusal is the rule's, not TOPIC_NOT_FOUND
    overrides.setdefault("topic", "RecvTopic")
    status, messages, replies = receive(v2, overrides.pop("topic"), polling_s=1, **overrides)
    assert status.code == expected, status
    assert messages == [] and replies[-1].HasField("delivery_timestamp")


@pytest.mark.parametrize("handle", ["", "garbage", "1 2 3 4 5 6 7 8 9", "x" * 10_000])
def test_bad_receipt_handles(v2, topics, handle):
    topics("TopicTest")
    ack = v2.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="TopicTest"),
            entries=[s.AckMessageEntry(message_id="m", receipt_handle=handle)],
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert ack.status.code == d.INVALID_RECEIPT_HANDLE and ack.entries[0].status.code == d.INVALID_RECEIPT_HANDLE
    change = v2.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="TopicTest"),
            receipt_handle=handle,
            invisible_duration=Duration(seconds=10),
            message_id="m",
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert change.status.code == d.INVALID_RECEIPT_HANDLE
    dlq = v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="TopicTest"),
            receipt_handle=handle,
            message_id="m",
            delivery_attempt=1,
            max_delivery_attempts=16,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert dlq.status.code == d.INVALID_RECEIPT_HANDLE


def test_unknown_transaction_id_writes_nothing(v2, store_stub):
    before = puts(store_stub)
    response = v2.EndTransaction(
        s.EndTransactionRequest(
            topic=d.Resource(name="TopicTest"),
            message_id="NOPE",
            transaction_id="NOPE",
            resolution=d.COMMIT,
            source=d.SOURCE_CLIENT,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert response.status.code == d.INVALID_TRANSACTION_ID
    assert puts(store_stub) == before
