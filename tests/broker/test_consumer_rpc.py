"""Consumer RPCs over raw v2 requests against the real store and broker servers."""

from __future__ import annotations

import hashlib
import threading
import time

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.store.v1 import store_pb2 as pb

from tests.support.store_reads import stored, wait_stored
from tests.support.v2_requests import METADATA, ack, change, end, message, receive, send, send_ok


def test_receive_maps_the_message_and_ack(v2, topics):
    topics("CTopic")
    send_ok(v2, message("CTopic", body=b"payload", tag="TagA", keys=["k1", "k2"], user_properties={"color": "red"}))
    status, [got], replies = receive(v2, "CTopic")
    assert status.code == d.OK and replies[0].HasField("status") and replies[-1].HasField("delivery_timestamp")
    sp = got.system_properties
    assert got.topic.name == "CTopic" and got.body == b"payload"
    assert dict(got.user_properties) == {"color": "red"}
    assert (
        sp.tag == "TagA" and list(sp.keys) == ["k1", "k2"] and sp.message_id == message().system_properties.message_id
    )
    assert sp.body_digest.type == d.MD5 and sp.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert sp.body_encoding == d.IDENTITY and sp.message_type == d.NORMAL and sp.delivery_attempt == 1
    assert sp.receipt_handle and sp.store_host and sp.store_timestamp.seconds > 0 and sp.born_host
    assert ack(v2, "CTopic", sp.receipt_handle).status.code == d.OK
    # acked: a repeat is answered OK (as RocketMQ does); a handle never issued is 40013
    assert ack(v2, "CTopic", sp.receipt_handle).status.code == d.OK
    assert ack(v2, "CTopic", sp.receipt_handle[:-2] + "AA").status.code == d.INVALID_RECEIPT_HANDLE
    started = time.monotonic()
    status, messages, replies = receive(v2, "CTopic", polling_s=5)
    assert status.code == d.MESSAGE_NOT_FOUND and not messages and replies[-1].HasField("delivery_timestamp")
    assert 4.5 < time.monotonic() - started < 8


def test_tag_filter(v2, store_stub, topics):
    topics("FTopic")
    for tag in ("TagA", "TagB", "TagC"):
        send_ok(v2, message("FTopic", body=tag.encode(), tag=tag, message_id=f"ID-{tag}"))
    assert wait_stored(store_stub, "FTopic", "ID-TagC")  # all dispatched: one receive sees both
    status, messages, _ = receive(v2, "FTopic", expression="TagA || TagC")
    assert status.code == d.OK and sorted(m.body for m in messages) == [b"TagA", b"TagC"]


def test_fifo_group_and_delivery_fields(v2, topics):
    topics("GTopic")
    send_ok(v2, message("GTopic", message_type=d.FIFO, message_group="order-1", tag="T"))
    status, [got], _ = receive(v2, "GTopic")
    assert got.system_properties.message_group == "order-1" and got.system_properties.message_type == d.FIFO
    assert dict(got.user_properties) == {"__SHARDINGKEY": "order-1"}  # passed through, as by the proxy


def test_committed_transaction_carries_its_transaction_id_property(v2, topics):
    topics("TxDeliver")
    sent = send(v2, message("TxDeliver", message_type=d.TRANSACTION, message_id="TX-DELIVER", tag="T"))
    assert sent.status.code == d.OK and sent.entries[0].transaction_id == "TX-DELIVER"
    assert end(v2, "TxDeliver", "TX-DELIVER", d.COMMIT).status.code == d.OK
    status, [got], _ = receive(v2, "TxDeliver")
    assert status.code == d.OK and got.system_properties.message_type == d.TRANSACTION
    assert dict(got.user_properties) == {"__transactionId__": "TX-DELIVER"}  # passed through, as by the proxy


def test_receive_from_an_unknown_topic_is_the_proxys_not_found(v2):
    status, messages, _ = receive(v2, "NeverMade")
    assert status.code == d.TOPIC_NOT_FOUND and not messages
    assert status.message == (
        "CODE: 17  DESC: No topic route info in name server for the topic: NeverMade, "
        "create it first (pyrmq topic create NeverMade --type NORMAL)"
    )


def test_long_poll_wakes_on_arrival(v2, topics):
    topics("WTopic")
    sender = threading.Timer(1.0, lambda: send_ok(v2, message("WTopic", body=b"late")))
    sender.start()
    started = time.monotonic()
    status, messages, _ = receive(v2, "WTopic", polling_s=15, timeout=20)
    sender.join()
    assert status.code == d.OK and [m.body for m in messages] == [b"late"]
    assert time.monotonic() - started < 5


def test_change_invisible_duration_then_ack_with_the_new_handle(v2, topics):
    topics("NTopic")
    send_ok(v2, message("NTopic"))
    _, [got], _ = receive(v2, "NTopic")
    old = got.system_properties.receipt_handle
    response = change(v2, "NTopic", old, 30)
    assert response.status.code == d.OK and response.receipt_handle and response.receipt_handle != old
    assert ack(v2, "NTopic", old).status.code == d.INVALID_RECEIPT_HANDLE
    assert ack(v2, "NTopic", response.receipt_handle).status.code == d.OK


def test_redelivery_after_change_to_zero(v2, topics):
    topics("RTopic")
    send_ok(v2, message("RTopic", body=b"again"))
    _, [got], _ = receive(v2, "RTopic")
    assert change(v2, "RTopic", got.system_properties.receipt_handle, 0).status.code == d.OK
    status, messages, _ = receive(v2, "RTopic", polling_s=10, timeout=15)  # revive runs every second
    assert status.code == d.OK and [m.body for m in messages] == [b"again"]
    assert messages[0].system_properties.delivery_attempt == 2
    assert messages[0].system_properties.message_id == got.system_properties.message_id


def test_error_codes(v2, topics):
    topics("ETopic")
    send_ok(v2, message("ETopic"))
    assert receive(v2, "ETopic", invisible_s=5)[0].code == d.ILLEGAL_INVISIBLE_TIME
    assert receive(v2, "ETopic", invisible_s=13 * 3600)[0].code == d.ILLEGAL_INVISIBLE_TIME
    assert receive(v2, "ETopic", invisible_s=None)[0].code == d.ILLEGAL_INVISIBLE_TIME
    assert receive(v2, "ETopic", filter_type=d.SQL, expression="a >")[0].code == d.ILLEGAL_FILTER_EXPRESSION
    assert receive(v2, "ETopic", timeout=3)[0].code == d.ILLEGAL_POLLING_TIME
    assert receive(v2, "ETopic", group="bad group!")[0].code == d.ILLEGAL_CONSUMER_GROUP
    assert ack(v2, "ETopic", "not-a-handle").status.code == d.INVALID_RECEIPT_HANDLE
    assert change(v2, "ETopic", "not-a-handle", 10).status.code == d.INVALID_RECEIPT_HANDLE
    assert change(v2, "ETopic", "not-a-handle", 13 * 3600).status.code == d.ILLEGAL_INVISIBLE_TIME
    dlq = v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="G1"), topic=d.Resource(name="ETopic"), receipt_handle="nope"
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert dlq.status.code == d.INVALID_RECEIPT_HANDLE


def test_ack_with_several_entries(v2, topics):
    topics("MTopic")
    send_ok(v2, message("MTopic"))
    _, [got], _ = receive(v2, "MTopic")
    response = v2.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="MTopic"),
            entries=[
                s.AckMessageEntry(message_id="a", receipt_handle=got.system_properties.receipt_handle),
                s.AckMessageEntry(message_id="b", receipt_handle="bogus"),
            ],
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert response.status.code == d.MULTIPLE_RESULTS
    assert [e.status.code for e in response.entries] == [d.OK, d.INVALID_RECEIPT_HANDLE]


def test_forward_to_dead_letter_queue(v2, store_stub, topics):
    topics("DTopic")
    send_ok(v2, message("DTopic", body=b"dead"))
    _, [got], _ = receive(v2, "DTopic")
    response = v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="DTopic"),
            receipt_handle=got.system_properties.receipt_handle,
            message_id=got.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=3,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert response.status.code == d.OK
    assert [m.body for m in stored(store_stub, "%DLQ%G1", 0, at_least=1)] == [b"dead"]


def test_query_assignment(v2, store_stub, topics):
    topics("ATopic")
    send_ok(v2, message("ATopic"))

    def assignments(group):
        response = v2.QueryAssignment(
            s.QueryAssignmentRequest(topic=d.Resource(name="ATopic"), group=d.Resource(name=group)),
            metadata=METADATA,
            timeout=10,
        )
        assert response.status.code == d.OK, response.status
        return [a.message_queue for a in response.assignments]

    [queue] = assignments("PlainGroup")
    assert queue.id == -1 and queue.topic.name == "ATopic" and queue.broker.endpoints.addresses
    assert queue.permission in (d.READ, d.READ_WRITE)
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(
            config=pb.SubscriptionGroupConfig(group_name="FifoGroup", consume_message_orderly=True)
        ),
        timeout=10,
    )
    queues = assignments("FifoGroup")
    assert [q.id for q in queues] == list(range(len(queues))) and len(queues) >= 1
