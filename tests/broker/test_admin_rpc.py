"""``pyrmq.admin.v1.Admin`` on a real broker (in-process, 127.0.0.1:0) over a real store: the
servicer's conversions and its gRPC status codes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from pyrmq.store.v1 import store_pb2 as store_pb

from services.broker.errors import Code, NotFoundError, RequestError, StoreCallError
from services.broker.v2.admin_servicer import ADMIN_SERVICE_NAME, status_of
from tests.support.admin_messages import put, wait_indexed


@pytest.fixture
def admin_stub(broker) -> Iterator[pb_grpc.AdminStub]:
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield pb_grpc.AdminStub(channel)


def code_of(call, request) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=10)
    return caught.value.code()


def test_topic_round_trip(admin_stub):
    response = admin_stub.CreateTopic(
        pb.CreateTopicRequest(name="Orders", message_type=pb.FIFO, queue_nums=4), timeout=10
    )
    assert response.created and response.topic == pb.Topic(
        name="Orders", message_type=pb.FIFO, read_queue_nums=4, write_queue_nums=4, perm=6, broker_groups=["broker-a"]
    )
    response = admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders"), timeout=10)  # unset: unchanged
    assert not response.created and (response.topic.message_type, response.topic.write_queue_nums) == (pb.FIFO, 4)
    assert [t.name for t in admin_stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics] == ["Orders"]
    admin_stub.DeleteTopic(pb.DeleteTopicRequest(name="Orders"), timeout=10)
    assert code_of(admin_stub.DeleteTopic, pb.DeleteTopicRequest(name="Orders")) == grpc.StatusCode.NOT_FOUND


def test_a_type_change_reaches_sends_at_once(broker, admin_stub):
    """The broker caches topic configs for 3 s; an admin change drops the cached entry."""
    admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders", message_type=pb.NORMAL), timeout=10)
    assert broker.topics.get("Orders").message_type == "NORMAL"
    admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders", message_type=pb.FIFO), timeout=10)
    assert broker.topics.get("Orders").message_type == "FIFO"


def test_invalid_arguments(admin_stub):
    assert code_of(admin_stub.CreateTopic, pb.CreateTopicRequest(name="bad topic")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(admin_stub.CreateTopic, pb.CreateTopicRequest(name="TBW102")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(admin_stub.CreateGroup, pb.CreateGroupRequest(name="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        code_of(admin_stub.QueryMessages, pb.QueryMessagesRequest(topic="T", key="k", message_id="i"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    with pytest.raises(grpc.RpcError) as caught:
        admin_stub.CreateTopic(pb.CreateTopicRequest(name="T", queue_nums=5000), timeout=10)
    assert "queue count must be in [1, 1024]" in caught.value.details()


def test_groups_and_progress(admin_stub, store_stub):
    response = admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1", fifo=True, max_delivery_attempts=3), timeout=10)
    assert response.created and response.group == pb.Group(
        name="G1", fifo=True, max_delivery_attempts=3, retry_policy=pb.RetryPolicy(kind=pb.RETRY_POLICY_DEFAULT)
    )
    response = admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1"), timeout=10)  # fifo unset: unchanged
    assert not response.created and response.group.fifo
    assert [g.name for g in admin_stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups] == ["G1"]

    admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders", queue_nums=1), timeout=10)
    put(store_stub, "Orders", 0, "ID0")
    wait_indexed(store_stub, "Orders", "ID0")
    progress = admin_stub.GetConsumerProgress(pb.GetConsumerProgressRequest(group="G1", topic="Orders"), timeout=10)
    assert progress.total_lag == 1 and list(progress.queues) == [
        pb.QueueProgress(
            topic="Orders", queue_id=0, min_offset=0, broker_offset=1, consumer_offset=-1, lag=1, broker_name="broker-a"
        )
    ]
    assert (
        code_of(admin_stub.GetConsumerProgress, pb.GetConsumerProgressRequest(group="Nobody"))
        == grpc.StatusCode.NOT_FOUND
    )


def test_reset_consumer_offset(admin_stub, store_stub):
    admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1"), timeout=10)
    admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders", queue_nums=2), timeout=10)
    stamps = [put(store_stub, "Orders", 0, f"ID{i}").store_timestamp_ms for i in range(3)]
    wait_indexed(store_stub, "Orders", "ID2")

    def reset(**target) -> list[tuple[int, int, int]]:
        response = admin_stub.ResetConsumerOffset(
            pb.ResetConsumerOffsetRequest(group="G1", topic="Orders", **target), timeout=10
        )
        assert (response.group, response.topic) == ("G1", "Orders")
        return [(q.queue_id, q.old_offset, q.new_offset) for q in response.queues]

    assert reset(position=pb.RESET_POSITION_LATEST) == [(0, -1, 3), (1, -1, 0)]
    assert reset(position=pb.RESET_POSITION_EARLIEST) == [(0, 3, 0), (1, 0, 0)]
    assert reset(offset=2) == [(0, 0, 2), (1, 0, 0)]
    assert reset(timestamp_ms=stamps[0]) == [(0, 2, 0), (1, 0, 0)]
    assert reset(timestamp_ms=0) == [(0, 0, 0), (1, 0, 0)]  # set, though 0: the oneof says which

    def code(**fields) -> grpc.StatusCode:
        return code_of(admin_stub.ResetConsumerOffset, pb.ResetConsumerOffsetRequest(**fields))

    assert code(group="G1", topic="Orders") == grpc.StatusCode.INVALID_ARGUMENT  # no target
    assert code(group="G1", topic="Orders", position=pb.RESET_POSITION_UNSPECIFIED) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(group="G1", topic="Orders", offset=-1) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(group="Nobody", topic="Orders", offset=0) == grpc.StatusCode.NOT_FOUND
    assert code(group="G1", topic="NoTopic", offset=0) == grpc.StatusCode.NOT_FOUND


def test_group_retry_policy_is_set_kept_and_reset(admin_stub, store_stub):
    customized = pb.RetryPolicy(kind=pb.RETRY_POLICY_CUSTOMIZED, backoffs_ms=[1_000, 5_000, 30_000])
    response = admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1", retry_policy=customized), timeout=10)
    assert response.group.retry_policy == customized
    stored = store_stub.GetGroup(store_pb.GetGroupRequest(group_name="G1"), timeout=10)
    assert list(stored.group_retry_policy.customized.next_ms) == [1_000, 5_000, 30_000]
    assert stored.group_retry_policy.type == store_pb.RETRY_POLICY_CUSTOMIZED

    # Other changes keep the policy.
    response = admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1", max_delivery_attempts=4), timeout=10)
    assert response.group.retry_policy == customized and response.group.max_delivery_attempts == 4

    exponential = pb.RetryPolicy(
        kind=pb.RETRY_POLICY_EXPONENTIAL, initial_backoff_ms=1_000, max_backoff_ms=60_000, backoff_multiplier=3
    )
    response = admin_stub.CreateGroup(
        pb.CreateGroupRequest(name="G1", retry_policy=exponential, must_exist=True), timeout=10
    )
    assert [g.retry_policy for g in admin_stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups] == [exponential]

    default = pb.RetryPolicy(kind=pb.RETRY_POLICY_DEFAULT)
    response = admin_stub.CreateGroup(pb.CreateGroupRequest(name="G1", retry_policy=default), timeout=10)
    assert response.group.retry_policy == default
    assert not store_stub.GetGroup(store_pb.GetGroupRequest(group_name="G1"), timeout=10).group_retry_policy.HasField(
        "customized"
    )

    bad = pb.RetryPolicy(kind=pb.RETRY_POLICY_EXPONENTIAL, initial_backoff_ms=5_000, max_backoff_ms=1_000)
    assert code_of(admin_stub.CreateGroup, pb.CreateGroupRequest(name="G1", retry_policy=bad)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code_of(admin_stub.CreateGroup, pb.CreateGroupRequest(name="G2", must_exist=True)) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert [g.name for g in admin_stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups] == ["G1"]


def test_query_messages(admin_stub, store_stub):
    admin_stub.CreateTopic(pb.CreateTopicRequest(name="Orders"), timeout=10)
    result = put(store_stub, "Orders", 1, "ID0", keys="order-7", body=b"\x00\xff")
    wait_indexed(store_stub, "Orders", "order-7")
    [by_key] = admin_stub.QueryMessages(pb.QueryMessagesRequest(topic="Orders", key="order-7"), timeout=10).messages
    assert (by_key.message_id, by_key.offset_msg_id, by_key.tag, list(by_key.keys), by_key.body) == (
        "ID0",
        result.offset_msg_id,
        "TagA",
        ["order-7"],
        b"\x00\xff",
    )
    assert by_key.properties["KEYS"] == "order-7" and by_key.queue_id == 1
    [by_id] = admin_stub.QueryMessages(pb.QueryMessagesRequest(message_id="ID0"), timeout=10).messages
    assert by_id == by_key
    assert code_of(admin_stub.QueryMessages, pb.QueryMessagesRequest(message_id="NOPE")) == grpc.StatusCode.NOT_FOUND


def test_store_unreachable_is_unavailable(make_broker):
    broker = make_broker(store_address="127.0.0.1:1")
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        with pytest.raises(grpc.RpcError) as caught:
            pb_grpc.AdminStub(channel).ListTopics(pb.ListTopicsRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "ListTopics" in caught.value.details()


def test_status_table():
    assert status_of(RequestError("x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(NotFoundError("x", Code.CONSUMER_GROUP_NOT_FOUND)) == grpc.StatusCode.NOT_FOUND
    assert status_of(StoreCallError("x")) == grpc.StatusCode.UNAVAILABLE
    assert status_of(StoreCallError("x", Code.PROXY_TIMEOUT)) == grpc.StatusCode.DEADLINE_EXCEEDED


def test_reflection_lists_the_admin_service(broker):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        [response] = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
    assert ADMIN_SERVICE_NAME == "pyrmq.admin.v1.Admin"
    assert ADMIN_SERVICE_NAME in [s.name for s in response.list_services_response.service]
