"""Renewal and release over raw v2 requests against the real store and broker servers
(services/broker/renewal.py; the core cases are in test_renewal.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.v2.server import BrokerServer
from tests.support.v2_requests import Stream, ack, message, push_consumer_settings, receive, send_ok

PUSH = (("x-mq-client-id", "push-host@1@0@renewal"),)
OTHER = (("x-mq-client-id", "other-host@2@0@renewal"),)
# Short times so that a test sees several renewals in seconds (the defaults are 60 s / 10 s / 5 s).
FAST_RENEWAL = dict(
    auto_renew_invisible_ms=3_000, renew_ahead_ms=1_500, renew_scan_interval_ms=300, renew_slices_ms=(3_000,)
)


@pytest.fixture
def v2_for() -> Iterator[Callable[[BrokerServer], s_grpc.MessagingServiceStub]]:
    """A MessagingService stub on a broker made with ``make_broker`` (its channel closed after the test)."""
    channels: list[grpc.Channel] = []

    def stub(broker: BrokerServer) -> s_grpc.MessagingServiceStub:
        channels.append(grpc.insecure_channel(f"127.0.0.1:{broker.port}"))
        return s_grpc.MessagingServiceStub(channels[-1])

    yield stub
    for channel in channels:
        channel.close()


def create_topic(store_stub, name: str) -> None:
    config = pb.TopicConfig(topic_name=name, read_queue_nums=4, write_queue_nums=4, perm=6)
    config.attributes["message.type"] = "NORMAL"
    store_stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=config), timeout=10)


def connect_push_consumer(v2, group: str, topic: str) -> Stream:
    stream = Stream(v2, metadata=PUSH)
    assert stream.send(push_consumer_settings(group, topic)).status.code == d.OK
    return stream


def test_a_renewed_message_is_not_redelivered_and_acks_with_its_first_handle(make_broker, store_stub, v2_for):
    broker = make_broker(**FAST_RENEWAL)
    v2 = v2_for(broker)
    create_topic(store_stub, "RenewRpcTopic")
    stream = connect_push_consumer(v2, "RenewRpcGroup", "RenewRpcTopic")
    send_ok(v2, message("RenewRpcTopic", body=b"long job"))
    status, [got], _ = receive(
        v2, "RenewRpcTopic", group="RenewRpcGroup", invisible_s=None, auto_renew=True, metadata=PUSH
    )
    assert status.code == d.OK
    # Another consumer polls for 5 s: without renewal the message would be back after 3 s.
    status, others, _ = receive(v2, "RenewRpcTopic", group="RenewRpcGroup", polling_s=5, metadata=OTHER)
    assert status.code == d.MESSAGE_NOT_FOUND and not others
    assert broker.renewer is not None and broker.renewer.stats().renewals >= 2
    handle = got.system_properties.receipt_handle
    assert ack(v2, "RenewRpcTopic", handle, group="RenewRpcGroup", metadata=PUSH).status.code == d.OK
    assert broker.renewer.stats().tracked == 0
    stream.outbound.put(None)


def test_notify_client_termination_hands_the_messages_to_another_consumer_within_seconds(
    make_broker, store_stub, v2_for
):
    broker = make_broker()  # the default 60 s invisible time
    v2 = v2_for(broker)
    create_topic(store_stub, "TermTopic")
    stream = connect_push_consumer(v2, "TermGroup", "TermTopic")
    send_ok(v2, message("TermTopic", body=b"unfinished"))
    status, [got], _ = receive(v2, "TermTopic", group="TermGroup", invisible_s=None, auto_renew=True, metadata=PUSH)
    assert status.code == d.OK
    terminated = time.monotonic()
    response = v2.NotifyClientTermination(
        s.NotifyClientTerminationRequest(group=d.Resource(name="TermGroup")), metadata=PUSH, timeout=10
    )
    assert response.status.code == d.OK
    stream.outbound.put(None)
    status, [again], _ = receive(v2, "TermTopic", group="TermGroup", polling_s=10, timeout=15, metadata=OTHER)
    waited_s = time.monotonic() - terminated
    assert status.code == d.OK and again.body == b"unfinished" and again.system_properties.delivery_attempt == 2
    assert waited_s < 5, f"redelivered {waited_s:.1f} s after the termination (invisible time: 60 s)"
    assert broker.renewer is not None and broker.renewer.stats().released == 1
    # The departed client's handle no longer acks; the new consumer's does.
    assert ack(v2, "TermTopic", got.system_properties.receipt_handle, group="TermGroup", metadata=PUSH).status.code == (
        d.INVALID_RECEIPT_HANDLE
    )
    assert ack(
        v2, "TermTopic", again.system_properties.receipt_handle, group="TermGroup", metadata=OTHER
    ).status.code == (d.OK)
