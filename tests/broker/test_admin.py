"""The admin core (``services/broker/admin.py``) over ``GrpcStoreClient``, against a real store
(FileStore behind the store's gRPC server on 127.0.0.1:0, see conftest)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.admin import AdminService, QueueReset, ResetPosition
from services.broker.errors import Code, NotFoundError, RequestError
from services.store.client.client import GrpcStoreClient
from tests.support.admin_messages import put, wait_indexed
from tests.support.waits import wait_until


@pytest.fixture
def store_client(store_address: str) -> Iterator[GrpcStoreClient]:
    client = GrpcStoreClient(store_address)
    yield client
    client.close()


@pytest.fixture
def changed() -> list[str]:
    return []


@pytest.fixture
def admin(store_client: GrpcStoreClient, changed: list[str]) -> AdminService:
    return AdminService(store_client, changed.append)


# -- topics --------------------------------------------------------------------------------------


def test_create_topic_then_update_keeps_unset_values(admin, changed, store_stub):
    topic, created = admin.create_topic("Orders", "FIFO", 4)
    assert created and (topic.name, topic.message_type, topic.read_queue_nums, topic.write_queue_nums) == (
        "Orders",
        "FIFO",
        4,
        4,
    )
    stored = store_stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"), timeout=10)
    assert stored.attributes["message.type"] == "FIFO" and stored.perm == 6

    # An operator made it read-only and added an attribute through the store API: kept on update.
    stored.perm = 4
    stored.attributes["custom"] = "yes"
    store_stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=stored), timeout=10)
    topic, created = admin.create_topic("Orders", "TRANSACTION")
    assert not created and (topic.message_type, topic.write_queue_nums, topic.perm) == ("TRANSACTION", 4, 4)
    assert store_stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"), timeout=10).attributes["custom"] == "yes"

    topic, _ = admin.create_topic("Orders", queue_nums=16)
    assert (topic.message_type, topic.read_queue_nums) == ("TRANSACTION", 16)
    assert changed == ["Orders"] * 3

    stored = store_stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"), timeout=10)
    stored.write_queue_nums = 8  # shrinking: writers first, readers drain queues 8-15
    store_stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=stored), timeout=10)
    topic, _ = admin.create_topic("Orders", "NORMAL")
    assert (topic.message_type, topic.read_queue_nums, topic.write_queue_nums) == ("NORMAL", 16, 8)


def test_new_topic_defaults_to_normal_with_8_queues(admin):
    topic, created = admin.create_topic("Plain")
    assert created and (topic.message_type, topic.read_queue_nums, topic.write_queue_nums) == ("NORMAL", 8, 8)


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("", "blank"),
        ("bad topic", "illegal characters"),
        ("a" * 128, "longer than"),
        ("TBW102", "system topic"),
        ("rmq_sys_wheel_timer", "system topic"),
    ],
)
def test_create_topic_refuses_illegal_and_system_names(admin, name, fragment):
    with pytest.raises(RequestError) as caught:
        admin.create_topic(name, "NORMAL")
    assert caught.value.code is Code.ILLEGAL_TOPIC and fragment in caught.value.message


@pytest.mark.parametrize("message_type, queue_nums", [("ROCKET", 0), ("normal", 0), ("NORMAL", -1), ("NORMAL", 1025)])
def test_create_topic_refuses_bad_types_and_counts(admin, message_type, queue_nums):
    with pytest.raises(RequestError):
        admin.create_topic("T", message_type, queue_nums)


def test_list_topics_hides_system_topics_unless_asked(admin, store_stub):
    admin.create_topic("B")
    admin.create_topic("A", "DELAY")
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="rmq_sys_wheel_timer")), timeout=10
    )
    assert [t.name for t in admin.list_topics()] == ["A", "B"]
    assert [t.name for t in admin.list_topics(include_system=True)] == ["A", "B", "rmq_sys_wheel_timer"]


def test_delete_topic(admin, changed):
    admin.create_topic("Gone")
    admin.delete_topic("Gone")
    assert [t.name for t in admin.list_topics()] == []
    with pytest.raises(NotFoundError) as caught:
        admin.delete_topic("Gone")
    assert caught.value.code is Code.TOPIC_NOT_FOUND and "Gone does not exist" in caught.value.message
    assert changed == ["Gone", "Gone", "Gone"]
    with pytest.raises(RequestError):
        admin.delete_topic("SCHEDULE_TOPIC_XXXX")


# -- groups --------------------------------------------------------------------------------------


def test_create_group_then_update_keeps_unset_values(admin):
    group, created = admin.create_group("G1")
    assert created and (group.consume_message_orderly, group.retry_max_times) == (False, 16)
    group, created = admin.create_group("G1", fifo=True, max_delivery_attempts=5)
    assert not created and (group.consume_message_orderly, group.retry_max_times) == (True, 4)
    group, _ = admin.create_group("G1")
    assert (group.consume_message_orderly, group.retry_max_times) == (True, 4)
    group, _ = admin.create_group("G1", fifo=False)
    assert (group.consume_message_orderly, group.retry_max_times) == (False, 4)


@pytest.mark.parametrize(
    "name, attempts",
    [("bad group", 0), ("g" * 121, 0), ("CID_RMQ_SYS_X", 0), ("DEFAULT_CONSUMER", 0), ("G", -1), ("G", 1001)],
)
def test_create_group_refuses_illegal_names_and_counts(admin, name, attempts):
    with pytest.raises(RequestError):
        admin.create_group(name, max_delivery_attempts=attempts)


def test_list_groups_hides_system_groups_unless_asked(admin, store_stub):
    admin.create_group("G2")
    admin.create_group("G1", fifo=True)
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name="CID_RMQ_SYS_TRANS")), timeout=10
    )
    assert [(g.name, g.consume_message_orderly) for g in admin.list_groups()] == [("G1", True), ("G2", False)]
    assert "CID_RMQ_SYS_TRANS" in [g.name for g in admin.list_groups(include_system=True)]


# -- consumer progress -----------------------------------------------------------------------------


def test_consumer_progress_per_queue_lag(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 3)
    admin.create_group("G1")
    for i in range(5):
        put(store_stub, "Orders", i % 2, f"ID{i}")  # queue 0: 3 messages, queue 1: 2
    store_stub.CommitConsumerOffset(
        pb.CommitConsumerOffsetRequest(group="G1", topic="Orders", queue_id=0, offset=2), timeout=10
    )
    wait_indexed(store_stub, "Orders", "ID4")  # dispatched, so max offsets are final
    progress = admin.consumer_progress("G1")
    assert progress.group == "G1"
    rows = [(q.topic, q.queue_id, q.min_offset, q.broker_offset, q.consumer_offset, q.lag) for q in progress.queues]
    assert rows == [("Orders", 0, 0, 3, 2, 1), ("Orders", 1, 0, 2, -1, 2), ("Orders", 2, 0, 0, -1, 0)]
    assert progress.total_lag == 3


def test_consumer_progress_of_one_topic_without_offsets(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 2)
    admin.create_group("G1")
    assert admin.consumer_progress("G1").queues == []
    put(store_stub, "Orders", 1, "ID0")
    wait_indexed(store_stub, "Orders", "ID0")
    progress = admin.consumer_progress("G1", "Orders")
    assert [(q.queue_id, q.consumer_offset, q.lag) for q in progress.queues] == [(0, -1, 0), (1, -1, 1)]


def test_consumer_progress_follows_pop_acks(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 1)
    admin.create_group("G1")
    for i in range(3):
        put(store_stub, "Orders", 0, f"ID{i}")
    wait_indexed(store_stub, "Orders", "ID2")
    popped = store_stub.PopMessages(
        pb.PopMessagesRequest(group="G1", topic="Orders", queue_id=0, max_count=2, invisible_duration_ms=60_000),
        timeout=10,
    ).messages
    for message in popped:
        store_stub.AckMessage(
            pb.AckMessageRequest(group="G1", topic="Orders", receipt_handle=message.receipt_handle), timeout=10
        )
    [queue] = admin.consumer_progress("G1", "Orders").queues
    assert (queue.broker_offset, queue.consumer_offset, queue.lag) == (3, 2, 1)


def test_consumer_progress_of_a_topic_includes_its_pop_retry_topic(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 1)
    admin.create_group("G1")
    put(store_stub, "Orders", 0, "ID0")
    wait_indexed(store_stub, "Orders", "ID0")

    def pop(invisible_ms: int) -> list:
        request = pb.PopMessagesRequest(group="G1", topic="Orders", queue_id=-1, invisible_duration_ms=invisible_ms)
        return list(store_stub.PopMessages(request, timeout=10).messages)

    assert len(pop(0)) == 1  # invisible for 0 ms: the store's revive puts a retry copy within a second
    [retried] = wait_until(lambda: pop(60_000), 15, "the retry copy popped")
    assert retried.source_topic == "%RETRY%G1_Orders"
    store_stub.AckMessage(
        pb.AckMessageRequest(group="G1", topic="Orders", receipt_handle=retried.receipt_handle), timeout=10
    )
    rows = [
        (q.topic, q.queue_id, q.broker_offset, q.consumer_offset, q.lag)
        for q in admin.consumer_progress("G1", "Orders").queues
    ]
    assert rows == [("%RETRY%G1_Orders", 0, 1, 1, 0), ("Orders", 0, 1, 1, 0)]  # sorted by topic


def test_consumer_progress_unknown_group_or_topic(admin):
    with pytest.raises(NotFoundError) as caught:
        admin.consumer_progress("Nobody")
    assert caught.value.code is Code.CONSUMER_GROUP_NOT_FOUND
    admin.create_group("G1")
    with pytest.raises(NotFoundError) as caught:
        admin.consumer_progress("G1", "NoTopic")
    assert caught.value.code is Code.TOPIC_NOT_FOUND
    with pytest.raises(RequestError):
        admin.consumer_progress("bad group")


# -- consumer offset reset -----------------------------------------------------------------------


def pop_bodies(store_stub, group: str, topic: str, max_count: int = 32) -> list[bytes]:
    """Pop as a consumer of ``group`` does (every queue), ack, and return the bodies."""
    popped = store_stub.PopMessages(
        pb.PopMessagesRequest(group=group, topic=topic, queue_id=-1, max_count=max_count, invisible_duration_ms=60_000),
        timeout=10,
    ).messages
    for message in popped:
        store_stub.AckMessage(
            pb.AckMessageRequest(group=group, topic=topic, receipt_handle=message.receipt_handle), timeout=10
        )
    return sorted(message.message.body for message in popped)


def test_reset_to_earliest_latest_and_an_offset(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 2)
    admin.create_group("G1")
    for i in range(6):
        put(store_stub, "Orders", i % 2, f"ID{i}", body=b"m%d" % i)  # 3 per queue
    wait_indexed(store_stub, "Orders", "ID5")
    assert pop_bodies(store_stub, "G1", "Orders") == [b"m%d" % i for i in range(6)]

    resets = admin.reset_consumer_offset("G1", "Orders", position=ResetPosition.EARLIEST)
    assert resets == [QueueReset(0, 3, 0), QueueReset(1, 3, 0)]
    assert pop_bodies(store_stub, "G1", "Orders") == [b"m%d" % i for i in range(6)]  # consumed again

    assert admin.reset_consumer_offset("G1", "Orders", offset=2) == [QueueReset(0, 3, 2), QueueReset(1, 3, 2)]
    assert pop_bodies(store_stub, "G1", "Orders") == [b"m4", b"m5"]
    # Beyond the end: brought to the max offset (the pop engine would move it there anyway).
    assert admin.reset_consumer_offset("G1", "Orders", offset=99) == [QueueReset(0, 3, 3), QueueReset(1, 3, 3)]

    admin.reset_consumer_offset("G1", "Orders", offset=0)
    assert admin.reset_consumer_offset("G1", "Orders", position=ResetPosition.LATEST) == [
        QueueReset(0, 0, 3),
        QueueReset(1, 0, 3),
    ]
    assert pop_bodies(store_stub, "G1", "Orders") == []
    put(store_stub, "Orders", 1, "ID6", body=b"m6")
    wait_indexed(store_stub, "Orders", "ID6")
    assert pop_bodies(store_stub, "G1", "Orders") == [b"m6"]


def test_reset_to_a_time_and_a_group_that_never_consumed(admin, store_stub):
    admin.create_topic("Orders", "NORMAL", 2)
    admin.create_group("G1")
    stamps = []
    for i in range(4):
        stamps.append(put(store_stub, "Orders", 0, f"ID{i}", body=b"m%d" % i).store_timestamp_ms)
        time.sleep(0.005)  # distinct store times
    wait_indexed(store_stub, "Orders", "ID3")
    assert stamps == sorted(set(stamps))
    resets = admin.reset_consumer_offset("G1", "Orders", timestamp_ms=stamps[2])
    assert resets == [QueueReset(0, -1, 2), QueueReset(1, -1, 0)]  # queue 1 is empty
    assert pop_bodies(store_stub, "G1", "Orders") == [b"m2", b"m3"]
    after_all = admin.reset_consumer_offset("G1", "Orders", timestamp_ms=stamps[-1] + 1)
    assert after_all == [QueueReset(0, 4, 4), QueueReset(1, 0, 0)]


def test_reset_errors(admin):
    with pytest.raises(NotFoundError) as caught:
        admin.reset_consumer_offset("Nobody", "Orders", offset=0)
    assert caught.value.code is Code.CONSUMER_GROUP_NOT_FOUND
    admin.create_group("G1")
    with pytest.raises(NotFoundError) as caught:
        admin.reset_consumer_offset("G1", "NoTopic", offset=0)
    assert caught.value.code is Code.TOPIC_NOT_FOUND
    admin.create_topic("Orders", "NORMAL", 1)
    for bad in ({}, {"offset": 0, "position": ResetPosition.LATEST}, {"offset": -1}, {"timestamp_ms": -5}):
        with pytest.raises(RequestError):
            admin.reset_consumer_offset("G1", "Orders", **bad)
    with pytest.raises(RequestError):
        admin.reset_consumer_offset("bad group", "Orders", offset=0)


# -- messages ------------------------------------------------------------------------------------


def test_query_by_key_oldest_first(admin, store_stub):
    admin.create_topic("Orders")
    put(store_stub, "Orders", 0, "ID0", keys="order-1 shared", body=b"first")
    put(store_stub, "Orders", 1, "ID1", keys="shared", body=b"second")
    wait_indexed(store_stub, "Orders", "shared", 2)
    found = admin.query_by_key("Orders", "shared")
    assert [(m.message_id, m.body, m.keys, m.tag) for m in found] == [
        ("ID0", b"first", ["order-1", "shared"], "TagA"),
        ("ID1", b"second", ["shared"], "TagA"),
    ]
    assert found[0].offset_msg_id and found[0].store_timestamp_ms > 0
    assert [m.message_id for m in admin.query_by_key("Orders", "order-1")] == ["ID0"]
    assert admin.query_by_key("Orders", "nothing") == []
    assert len(admin.query_by_key("Orders", "shared", max_num=1)) == 1


def test_query_by_key_errors(admin):
    with pytest.raises(RequestError):
        admin.query_by_key("", "k")
    with pytest.raises(NotFoundError):
        admin.query_by_key("NoTopic", "k")
    admin.create_topic("Orders")
    with pytest.raises(RequestError):
        admin.query_by_key("Orders", "")
    with pytest.raises(RequestError):
        admin.query_by_key("Orders", "k", max_num=65)


def test_query_by_id_client_id_offset_id_and_not_found(admin, store_stub):
    admin.create_topic("Orders")
    admin.create_topic("Other")
    client_id = "0102FC0000000146A20B13E20600000001"
    result = put(store_stub, "Orders", 2, client_id, body=b"by id")
    put(store_stub, "Other", 0, "ID-OTHER", keys=client_id)  # a KEYS word equal to the id: not a match
    wait_indexed(store_stub, "Other", client_id)

    [found] = admin.query_by_id(client_id)  # every topic searched
    assert (found.topic, found.queue_id, found.body, found.message_id) == ("Orders", 2, b"by id", client_id)
    assert [m.topic for m in admin.query_by_id(client_id, "Orders")] == ["Orders"]
    [by_offset_id] = admin.query_by_id(result.offset_msg_id.lower())
    assert (by_offset_id.phy_offset, by_offset_id.message_id) == (result.phy_offset, client_id)

    with pytest.raises(NotFoundError) as caught:
        admin.query_by_id(client_id, "Other")
    assert caught.value.code is Code.MESSAGE_NOT_FOUND and "in topic Other" in caught.value.message
    with pytest.raises(NotFoundError):
        admin.query_by_id("7F000001" + "0" * 16 + "00FFFFFF")  # shaped like an offset id, names no record
    with pytest.raises(NotFoundError):
        admin.query_by_id(client_id, "NoTopic")
    with pytest.raises(RequestError):
        admin.query_by_id(" ")
