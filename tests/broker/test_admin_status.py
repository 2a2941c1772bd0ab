"""Cluster status (``AdminService.cluster_status``, ``Admin.GetClusterStatus``): topics' queue
offsets and consumer groups' lag and in-flight counts, over a real store (see conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from pyrmq.admin.v1 import admin_pb2, admin_pb2_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.admin import AdminService
from services.store.client.client import GrpcStoreClient
from tests.support.admin_messages import put, wait_indexed


@pytest.fixture
def store_client(store_address: str) -> Iterator[GrpcStoreClient]:
    client = GrpcStoreClient(store_address)
    yield client
    client.close()


@pytest.fixture
def admin(store_client: GrpcStoreClient) -> AdminService:
    return AdminService(store_client, store_address=lambda: store_client.address)


def pop(store_stub, group: str, topic: str, queue_id: int, max_count: int) -> list[pb.PoppedMessage]:
    return list(
        store_stub.PopMessages(
            pb.PopMessagesRequest(
                group=group, topic=topic, queue_id=queue_id, max_count=max_count, invisible_duration_ms=60_000
            ),
            timeout=10,
        ).messages
    )


def ack(store_stub, group: str, topic: str, popped: list[pb.PoppedMessage]) -> None:
    for message in popped:
        store_stub.AckMessage(
            pb.AckMessageRequest(group=group, topic=topic, receipt_handle=message.receipt_handle), timeout=10
        )


def test_empty_store(admin, store_address):
    status = admin.cluster_status()
    assert (status.store_address, status.topics, status.groups) == (store_address, [], [])


def test_topics_with_queue_offsets_and_message_counts(admin, store_stub):
    admin.create_topic("Orders", "FIFO", 3)
    admin.create_topic("Empty", "NORMAL", 2)
    for i in range(5):
        put(store_stub, "Orders", i % 2, f"ID{i}")  # queue 0: 3 messages, queue 1: 2
    wait_indexed(store_stub, "Orders", "ID4")  # dispatched, so max offsets are final
    status = admin.cluster_status()
    assert [(t.topic.name, t.topic.message_type, t.message_count) for t in status.topics] == [
        ("Empty", "NORMAL", 0),
        ("Orders", "FIFO", 5),
    ]
    orders = status.topics[1]
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in orders.queues] == [(0, 0, 3), (1, 0, 2), (2, 0, 0)]


def test_write_queues_beyond_the_read_queues_are_counted(admin, store_stub):
    """A topic being shrunk (or grown) has read != write queues: every queue holds messages."""
    admin.create_topic("Orders", "NORMAL", 4)
    for queue_id in range(4):
        put(store_stub, "Orders", queue_id, f"ID{queue_id}")
    wait_indexed(store_stub, "Orders", "ID3")
    config = store_stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"), timeout=10)
    config.read_queue_nums = 2
    store_stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=config), timeout=10)
    [orders] = admin.cluster_status().topics
    assert len(orders.queues) == 4 and orders.message_count == 4


def test_system_topics_and_groups_only_if_asked(admin, store_stub):
    admin.create_topic("Orders")
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name="rmq_sys_wheel_timer", read_queue_nums=1, write_queue_nums=1)
        ),
        timeout=10,
    )
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name="CID_RMQ_SYS_TRANS")), timeout=10
    )
    status = admin.cluster_status()
    assert [t.topic.name for t in status.topics] == ["Orders"] and status.groups == []
    everything = admin.cluster_status(include_system=True)
    assert "rmq_sys_wheel_timer" in [t.topic.name for t in everything.topics]
    assert [(g.group, g.topic) for g in everything.groups] == [("CID_RMQ_SYS_TRANS", "")]


def test_group_lag_and_in_flight_per_topic(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 2)
    admin.create_topic("Payments", "NORMAL", 1)
    admin.create_group("Idle")
    for i in range(6):
        put(store_stub, "Orders", i % 2, f"ID{i}")  # 3 per queue
    put(store_stub, "Payments", 0, "PAY0")
    wait_indexed(store_stub, "Orders", "ID5")
    wait_indexed(store_stub, "Payments", "PAY0")

    ack(store_stub, "G1", "Orders", pop(store_stub, "G1", "Orders", 0, 2))  # queue 0: 2 consumed
    unacked = pop(store_stub, "G1", "Orders", 1, 1)  # queue 1: 1 in flight
    assert len(unacked) == 1
    store_stub.CommitConsumerOffset(
        pb.CommitConsumerOffsetRequest(group="G2", topic="Payments", queue_id=0, offset=1), timeout=10
    )
    status = admin.cluster_status()
    rows = {(g.group, g.topic): g for g in status.groups}
    assert [key for key in rows] == [("G1", "Orders"), ("G2", "Payments"), ("Idle", "")]
    orders = rows[("G1", "Orders")]
    # In-flight messages are part of the lag (queue 1's start, 0, was committed at its first pop).
    assert (orders.lag, orders.inflight_messages) == (6 - 2, 1)
    assert [(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in orders.queues] == [
        (0, 3, 2, 1),
        (1, 3, 0, 3),
    ]
    assert (rows[("G2", "Payments")].lag, rows[("G2", "Payments")].inflight_messages) == (0, 0)
    assert rows[("Idle", "")].queues == []

    ack(store_stub, "G1", "Orders", unacked)
    orders = {(g.group, g.topic): g for g in admin.cluster_status().groups}[("G1", "Orders")]
    assert (orders.lag, orders.inflight_messages) == (6 - 3, 0)


def test_consumer_progress_still_agrees(admin, store_stub):
    """consumer_progress and cluster_status share the per-queue computation."""
    admin.create_topic("Orders", "NORMAL", 2)
    admin.create_group("G1")
    for i in range(4):
        put(store_stub, "Orders", i % 2, f"ID{i}")
    wait_indexed(store_stub, "Orders", "ID3")
    ack(store_stub, "G1", "Orders", pop(store_stub, "G1", "Orders", 0, 1))
    [row] = admin.cluster_status().groups
    assert row.queues == admin.consumer_progress("G1").queues and row.lag == 3


def test_get_cluster_status_rpc(broker, store_stub, store_address):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        stub.CreateTopic(admin_pb2.CreateTopicRequest(name="Orders", queue_nums=2), timeout=10)
        put(store_stub, "Orders", 1, "ID0")
        wait_indexed(store_stub, "Orders", "ID0")
        store_stub.CommitConsumerOffset(
            pb.CommitConsumerOffsetRequest(group="G1", topic="Orders", queue_id=0, offset=0), timeout=10
        )
        response = stub.GetClusterStatus(admin_pb2.GetClusterStatusRequest(), timeout=10)
    assert response.store_address == store_address
    [topic] = response.topics
    assert (topic.topic.name, topic.topic.message_type, topic.message_count) == ("Orders", admin_pb2.NORMAL, 1)
    assert list(topic.queues) == [
        admin_pb2.QueueOffsets(queue_id=0, min_offset=0, max_offset=0, broker_name="broker-a"),
        admin_pb2.QueueOffsets(queue_id=1, min_offset=0, max_offset=1, broker_name="broker-a"),
    ]
    assert list(topic.topic.broker_groups) == ["broker-a"]
    assert list(response.broker_groups) == [admin_pb2.BrokerGroupStatus(name="broker-a", store_address=store_address)]
    [group] = response.groups
    assert (group.group, group.topic, group.lag, group.inflight_messages) == ("G1", "Orders", 1, 0)
    assert [q.consumer_offset for q in group.queues] == [0, -1]


def test_get_cluster_status_store_unreachable(make_broker):
    broker = make_broker(store_address="127.0.0.1:1")
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        with pytest.raises(grpc.RpcError) as caught:
            admin_pb2_grpc.AdminStub(channel).GetClusterStatus(admin_pb2.GetClusterStatusRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
