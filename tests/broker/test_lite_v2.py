"""Lite consumers over raw apache.rocketmq.v2 requests, for what the official Python client does
not send: SyncLiteSubscription's offset options (MIN, MAX, OFFSET, TAIL_N, LAST), ChangeInvisibleDuration
with ``suspend`` (the Java client's every lite nack), and the NotifyUnsubscribeLiteCommand an
exclusive group's previous holder gets on its Telemetry stream; lite topics in the admin status
and consumer progress."""

from __future__ import annotations

import queue

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration
from pyrmq.admin.v1 import admin_pb2, admin_pb2_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.lite import lmq_name
from services.store.client.client import GrpcStoreClient
from tests.support.v2_requests import METADATA, Stream, ack, message, receive, send_ok
from tests.support.waits import wait_until

PARENT = "LiteV2Parent"
GROUP = "LiteV2Group"


def lite_message(lite_topic: str, body: str) -> d.Message:
    message_id = "01" + body.encode().hex().upper().rjust(32, "0")
    return message(PARENT, body.encode(), message_id=message_id, message_type=d.LITE, lite_topic=lite_topic)


def sync(v2, action: int, *names: str, metadata=METADATA, group: str = GROUP, **option) -> d.Status:
    request = s.SyncLiteSubscriptionRequest(
        action=action, topic=d.Resource(name=PARENT), group=d.Resource(name=group), lite_topic_set=list(names)
    )
    if option:
        request.offset_option.CopyFrom(d.OffsetOption(**option))
    return v2.SyncLiteSubscription(request, metadata=metadata, timeout=10).status


def bodies(messages: list[d.Message]) -> list[str]:
    return [m.body.decode() for m in messages]


def receive_lite(v2, metadata=METADATA, polling_s: int = 5) -> list[d.Message]:
    status, messages, _ = receive(v2, PARENT, GROUP, polling_s=polling_s, metadata=metadata, timeout=polling_s + 5)
    assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
    return messages


@pytest.fixture
def lite_v2(v2, topics, store_address):
    topics(PARENT, message_type="LITE", queue_nums=2)
    for i in range(4):
        send_ok(v2, lite_message("backlog", f"b{i}"))
    # A send is answered once stored; the lite topic's units come with dispatch, a moment later.
    # The offset options (MAX: "the end") read the end the index has.
    store = GrpcStoreClient(store_address)
    try:
        wait_until(lambda: store.queue_offsets(lmq_name(PARENT, "backlog"), 0)[1] == 4, what="the backlog dispatched")
    finally:
        store.close()
    return v2


def test_offset_options_move_the_groups_offset_in_each_lite_topic(lite_v2):
    v2 = lite_v2
    assert sync(v2, d.PARTIAL_ADD, "backlog", policy=d.OffsetOption.MAX).code == d.OK
    send_ok(v2, lite_message("backlog", "new"))
    got = receive_lite(v2)
    assert bodies(got) == ["new"]  # MAX: the backlog is skipped
    ack(v2, PARENT, got[0].system_properties.receipt_handle, GROUP)
    assert sync(v2, d.PARTIAL_ADD, "backlog", policy=d.OffsetOption.MIN).code == d.OK
    assert bodies(receive_lite(v2)) == ["b0", "b1", "b2", "b3", "new"]  # MIN: from the start (the batch is dropped)
    assert sync(v2, d.PARTIAL_ADD, "backlog", offset=3).code == d.OK
    got = receive_lite(v2)
    assert bodies(got) == ["b3", "new"]
    for m in got:
        ack(v2, PARENT, m.system_properties.receipt_handle, GROUP)
    assert sync(v2, d.PARTIAL_ADD, "backlog", tail_n=2).code == d.OK  # back 2 from the group's offset (5)
    assert bodies(receive_lite(v2)) == ["b3", "new"]
    assert sync(v2, d.PARTIAL_ADD, "backlog", offset=-1).code == d.BAD_REQUEST


def test_a_suspended_message_is_not_another_attempt(lite_v2):
    v2 = lite_v2
    assert sync(v2, d.PARTIAL_ADD, "backlog").code == d.OK
    first = receive_lite(v2)
    assert [m.system_properties.delivery_attempt for m in first] == [1, 1, 1, 1]
    for m, suspend in zip(first, (True, False, False, False)):
        request = s.ChangeInvisibleDurationRequest(
            group=d.Resource(name=GROUP),
            topic=d.Resource(name=PARENT),
            receipt_handle=m.system_properties.receipt_handle,
            invisible_duration=Duration(nanos=100_000_000),
            message_id=m.system_properties.message_id,
            lite_topic="backlog",
            suspend=suspend,
        )
        assert v2.ChangeInvisibleDuration(request, metadata=METADATA, timeout=10).status.code == d.OK
    again = receive_lite(v2)
    assert [(m.body.decode(), m.system_properties.delivery_attempt) for m in again] == [
        ("b0", 1),
        ("b1", 2),
        ("b2", 2),
        ("b3", 2),
    ]


def test_an_exclusive_groups_previous_holder_is_told(lite_v2, store_address):
    v2 = lite_v2
    store = GrpcStoreClient(store_address)
    try:
        store.update_group(GROUP, False, 16, None, {"lite.sub.model": "Exclusive"})
    finally:
        store.close()
    first = (("x-mq-client-id", "lite-first"),)
    stream = Stream(v2, metadata=first)
    settings = d.Settings(
        client_type=d.LITE_PUSH_CONSUMER,
        subscription=d.Subscription(group=d.Resource(name=GROUP)),
    )
    reply = stream.send(s.TelemetryCommand(settings=settings))
    assert reply.settings.subscription.lite_subscription_quota == 2000
    assert reply.settings.subscription.max_lite_topic_size == 64
    assert sync(v2, d.PARTIAL_ADD, "backlog", metadata=first).code == d.OK
    assert sync(v2, d.PARTIAL_ADD, "backlog", metadata=(("x-mq-client-id", "lite-second"),)).code == d.OK
    notice = stream.replies.get(timeout=10)
    assert notice.WhichOneof("command") == "notify_unsubscribe_lite_command"
    assert notice.notify_unsubscribe_lite_command.lite_topic == "backlog"
    # its keep-alive still names it: told again
    assert sync(v2, d.COMPLETE_ADD, "backlog", metadata=first).code == d.OK
    assert stream.replies.get(timeout=10).notify_unsubscribe_lite_command.lite_topic == "backlog"
    assert bodies(receive_lite(v2, metadata=(("x-mq-client-id", "lite-second"),))) == ["b0", "b1", "b2", "b3"]
    with pytest.raises(queue.Empty):
        stream.replies.get(timeout=0.2)
    stream.outbound.put(None)


def test_status_and_consumer_progress_count_lite_topics_per_parent(lite_v2, broker):
    """GetClusterStatus: the parent's lite topic count, and one row per (group, parent) with the
    lag of all its lite topics; GetConsumerProgress: a row per lite topic the group consumed."""
    v2 = lite_v2
    send_ok(v2, lite_message("other", "o0"))
    assert sync(v2, d.PARTIAL_ADD, "backlog").code == d.OK
    got = receive_lite(v2)
    for m in got[:2]:
        ack(v2, PARENT, m.system_properties.receipt_handle, GROUP)
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        status = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest(), timeout=10)
        progress = admin.GetConsumerProgress(admin_pb2.GetConsumerProgressRequest(group=GROUP), timeout=10)
        only = admin.GetConsumerProgress(admin_pb2.GetConsumerProgressRequest(group=GROUP, topic=PARENT), timeout=10)
    [parent] = [t for t in status.topics if t.topic.name == PARENT]
    assert (parent.lite_topic_count, parent.message_count) == (2, 5)
    [row] = [g for g in status.groups if g.group == GROUP]
    assert (row.topic, row.lite_topic_count, row.lag, row.inflight_messages) == (PARENT, 1, 2, 2)
    assert [(q.topic, q.lite_topic, q.broker_offset, q.consumer_offset, q.lag) for q in progress.queues] == [
        (PARENT, "backlog", 4, 2, 2)
    ]
    assert progress.total_lag == 2 and list(only.queues) == list(progress.queues)


def test_a_lite_message_goes_to_the_dead_letter_queue_by_its_parent_and_lite_topic(lite_v2, store_stub):
    """ForwardMessageToDeadLetterQueue with the parent topic and lite_topic (what the clients send
    after the last attempt): the message is in %DLQ%<group>, still naming its lite topic."""
    v2 = lite_v2
    assert sync(v2, d.PARTIAL_ADD, "backlog").code == d.OK
    first = receive_lite(v2)[0]
    request = s.ForwardMessageToDeadLetterQueueRequest(
        group=d.Resource(name=GROUP),
        topic=d.Resource(name=PARENT),
        receipt_handle=first.system_properties.receipt_handle,
        message_id=first.system_properties.message_id,
        delivery_attempt=1,
        max_delivery_attempts=1,
        lite_topic="backlog",
    )
    assert v2.ForwardMessageToDeadLetterQueue(request, metadata=METADATA, timeout=10).status.code == d.OK
    dlq = f"%DLQ%{GROUP}"
    stored = wait_until(  # the DLQ copy is readable once dispatched
        lambda: (
            store_stub.GetMessages(
                pb.GetMessagesRequest(topic=dlq, queue_id=0, queue_offset=0, max_count=32), timeout=10
            ).messages
        ),
        what="the message in the DLQ",
    )
    assert [(m.body, m.properties["__LITE_TOPIC"]) for m in stored] == [(b"b0", "backlog")]
