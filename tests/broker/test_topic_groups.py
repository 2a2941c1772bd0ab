"""Topics over broker groups through the admin API (issue 17): ``pyrmq topic create T --queues 8
--groups g1,g2`` puts the topic in each group's store and its route in etcd; ``topic update``
adds queues or groups; ``topic delete`` removes it from every group; consumer groups are created
in every group; status, consumer progress and reset, and message queries cover every group, and
name each queue's group. A real etcd and two real stores (tests/support/broker_groups.py)."""

from __future__ import annotations

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.coordination.route_view import RouteStore
from services.launcher.cli import main as pyrmq
from services.store.client.model import TopicInfo
from tests.support.broker_groups import GROUP_A, GROUP_B, TwoGroups, two_groups
from tests.support.v2_requests import METADATA, message, send_ok
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd")


@pytest.fixture
def cluster(tmp_path, etcd_server):
    etcd = etcd_server.client()
    try:
        with two_groups(tmp_path, etcd=etcd, registered=(GROUP_A, GROUP_B)) as groups:
            yield groups
    finally:
        etcd.close()


@pytest.fixture
def admin(cluster: TwoGroups):
    with grpc.insecure_channel(f"127.0.0.1:{cluster.broker.port}") as channel:
        yield pb_grpc.AdminStub(channel)


def create(admin, name, queue_nums=0, groups=(), message_type=pb.MESSAGE_TYPE_UNSPECIFIED) -> pb.CreateTopicResponse:
    return admin.CreateTopic(
        pb.CreateTopicRequest(name=name, message_type=message_type, queue_nums=queue_nums, broker_groups=list(groups)),
        timeout=10,
    )


def route_queues(cluster: TwoGroups, topic: str) -> list[tuple[str, int, str]]:
    response = cluster.v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=METADATA, timeout=10)
    assert response.status.code == d.OK, response.status
    return [(q.broker.name, q.id, d.Permission.Name(q.permission)) for q in response.message_queues]


def stored(cluster: TwoGroups, group: str, topic: str):
    info = cluster.stores[group].get_topic(topic)
    return None if info is None else (info.read_queue_nums, info.write_queue_nums, info.message_type)


def test_create_places_the_topic_on_every_group_and_routes_it(cluster: TwoGroups, admin) -> None:
    response = create(admin, "Orders", 8, message_type=pb.FIFO)
    assert response.created and list(response.topic.broker_groups) == [GROUP_A, GROUP_B]
    assert stored(cluster, GROUP_A, "Orders") == stored(cluster, GROUP_B, "Orders") == (8, 8, "FIFO")
    route = RouteStore(cluster.etcd).get("Orders")
    assert route is not None and route.message_type == "FIFO"
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [
        (GROUP_A, 8, 8),
        (GROUP_B, 8, 8),
    ]
    assert cluster.routes_seen(lambda routes: "Orders" in routes)
    assert route_queues(cluster, "Orders") == [(g, i, "READ_WRITE") for g in (GROUP_A, GROUP_B) for i in range(8)]


def test_update_adds_queues_and_groups_and_keeps_the_others(cluster: TwoGroups, admin) -> None:
    create(admin, "Grow", 4, groups=[GROUP_A])
    assert stored(cluster, GROUP_B, "Grow") is None
    assert [q.broker_name for q in RouteStore(cluster.etcd).get("Grow").queue_datas] == [GROUP_A]

    response = create(admin, "Grow", groups=[GROUP_B])  # queue count unset: the new group takes the default
    assert response.created  # new in broker-b
    assert list(response.topic.broker_groups) == [GROUP_A, GROUP_B]
    assert stored(cluster, GROUP_A, "Grow") == (4, 4, "NORMAL")  # untouched
    assert stored(cluster, GROUP_B, "Grow")[2] == "NORMAL"  # the type the topic has

    create(admin, "Grow", 16)  # no groups named: every group of the cluster
    assert stored(cluster, GROUP_A, "Grow")[:2] == stored(cluster, GROUP_B, "Grow")[:2] == (16, 16)
    assert [q.write_queue_nums for q in RouteStore(cluster.etcd).get("Grow").queue_datas] == [16, 16]


def test_delete_removes_the_topic_from_every_group_and_its_route(cluster: TwoGroups, admin) -> None:
    create(admin, "Gone", 2)
    admin.DeleteTopic(pb.DeleteTopicRequest(name="Gone"), timeout=10)
    assert stored(cluster, GROUP_A, "Gone") is None and stored(cluster, GROUP_B, "Gone") is None
    assert RouteStore(cluster.etcd).get("Gone") is None
    with pytest.raises(grpc.RpcError) as caught:
        admin.DeleteTopic(pb.DeleteTopicRequest(name="Gone"), timeout=10)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


def test_list_shows_each_topic_with_its_groups(cluster: TwoGroups, admin) -> None:
    create(admin, "Both", 2)
    create(admin, "OnlyB", 2, groups=[GROUP_B])
    topics = {t.name: list(t.broker_groups) for t in admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    assert topics == {"Both": [GROUP_A, GROUP_B], "OnlyB": [GROUP_B]}


def test_consumer_groups_are_created_in_every_group(cluster: TwoGroups, admin) -> None:
    admin.CreateGroup(pb.CreateGroupRequest(name="Ordered", fifo=True, max_delivery_attempts=5), timeout=10)
    for group in (GROUP_A, GROUP_B):
        info = cluster.stores[group].get_group("Ordered")
        assert info is not None and info.consume_message_orderly and info.retry_max_times == 4


def test_bad_group_names_are_refused_with_nothing_written(cluster: TwoGroups, admin) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        create(admin, "Bad", 2, groups=["a/b"])
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert stored(cluster, GROUP_A, "Bad") is None and RouteStore(cluster.etcd).get("Bad") is None


def test_the_cli_creates_and_updates_a_topic_over_groups(cluster: TwoGroups, capsys) -> None:
    address = f"127.0.0.1:{cluster.broker.port}"
    created = ["topic", "create", "Cli", "--type", "NORMAL", "--queues", "2", "--groups", GROUP_A]
    assert pyrmq([*created, "--endpoint", address]) == 0
    assert "Created topic Cli" in capsys.readouterr().out
    assert pyrmq(["topic", "update", "Cli", "--groups", GROUP_B, "--queues", "2", "--endpoint", address]) == 0
    assert "broker groups broker-a, broker-b" in capsys.readouterr().out
    assert stored(cluster, GROUP_B, "Cli") == (2, 2, "NORMAL")


def test_without_etcd_only_the_home_group_can_hold_topics(tmp_path) -> None:
    with two_groups(tmp_path) as groups, grpc.insecure_channel(f"127.0.0.1:{groups.broker.port}") as channel:
        admin = pb_grpc.AdminStub(channel)
        assert list(create(admin, "Home", 2).topic.broker_groups) == [GROUP_A]
        with pytest.raises(grpc.RpcError) as caught:
            create(admin, "Away", 2, groups=[GROUP_B])
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "no etcd_endpoints" in caught.value.details()


def spread_with_messages(cluster: TwoGroups, admin, count: int = 4) -> None:
    """Topic Spread (2 queues in each group), consumer group G, ``count`` messages keyed K<i>
    sent through the broker (alternating groups), indexed in their stores."""
    create(admin, "Spread", 2)
    admin.CreateGroup(pb.CreateGroupRequest(name="G"), timeout=10)
    assert cluster.routes_seen(lambda routes: "Spread" in routes)
    for i in range(count):
        send_ok(cluster.v2, message("Spread", body=f"b{i}".encode(), message_id=f"0{i:031X}", keys=[f"K{i}"]))
    wait_until(lambda: query(admin, key=f"K{count - 1}").messages, 10, "the last message indexed")


def query(admin, **fields) -> pb.QueryMessagesResponse:
    return admin.QueryMessages(pb.QueryMessagesRequest(topic="Spread", **fields), timeout=10)


def test_status_progress_reset_and_queries_cover_every_group(cluster: TwoGroups, admin) -> None:
    spread_with_messages(cluster, admin)
    status = admin.GetClusterStatus(pb.GetClusterStatusRequest(), timeout=10)
    assert [(g.name, bool(g.store_address), g.error) for g in status.broker_groups] == [
        (GROUP_A, True, ""),
        (GROUP_B, True, ""),
    ]
    [topic] = [t for t in status.topics if t.topic.name == "Spread"]
    assert list(topic.topic.broker_groups) == [GROUP_A, GROUP_B] and topic.message_count == 4
    assert [(q.broker_name, q.queue_id, q.max_offset) for q in topic.queues] == [
        (GROUP_A, 0, 1),
        (GROUP_A, 1, 1),
        (GROUP_B, 0, 1),
        (GROUP_B, 1, 1),
    ]  # round-robin a0, b0, a1, b1: one message in each queue

    progress = admin.GetConsumerProgress(pb.GetConsumerProgressRequest(group="G", topic="Spread"), timeout=10)
    assert progress.total_lag == 4 and not progress.unreachable_broker_groups
    assert [(q.broker_name, q.queue_id, q.lag) for q in progress.queues] == [
        (g, i, 1) for g in (GROUP_A, GROUP_B) for i in range(2)
    ]
    reset = admin.ResetConsumerOffset(
        pb.ResetConsumerOffsetRequest(group="G", topic="Spread", position=pb.RESET_POSITION_LATEST), timeout=10
    )
    assert sorted((q.broker_name, q.queue_id, q.new_offset) for q in reset.queues) == [
        (g, i, 1) for g in (GROUP_A, GROUP_B) for i in range(2)
    ]
    lag = admin.GetConsumerProgress(pb.GetConsumerProgressRequest(group="G", topic="Spread"), timeout=10).total_lag
    assert lag == 0

    found = {m.keys[0]: m.broker_name for i in range(4) for m in query(admin, key=f"K{i}").messages}
    assert found == {"K0": GROUP_A, "K1": GROUP_B, "K2": GROUP_A, "K3": GROUP_B}
    [by_id] = query(admin, message_id=f"0{1:031X}").messages
    assert (by_id.broker_name, by_id.body) == (GROUP_B, b"b1")
    with pytest.raises(grpc.RpcError) as caught:
        query(admin, message_id=f"0{9:031X}")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # in no group


def test_a_group_that_is_down_is_reported_and_the_others_still_answer(cluster: TwoGroups, admin) -> None:
    spread_with_messages(cluster, admin)
    cluster.stop_store(GROUP_B)
    status = admin.GetClusterStatus(pb.GetClusterStatusRequest(), timeout=30)
    states = {g.name: g for g in status.broker_groups}
    assert states[GROUP_A].error == "" and states[GROUP_B].error and not states[GROUP_B].store_address
    [topic] = [t for t in status.topics if t.topic.name == "Spread"]
    assert {q.broker_name for q in topic.queues} == {GROUP_A} and topic.message_count == 2
    progress = admin.GetConsumerProgress(pb.GetConsumerProgressRequest(group="G", topic="Spread"), timeout=30)
    assert list(progress.unreachable_broker_groups) == [GROUP_B] and progress.total_lag == 2  # partial, and says so
    assert list(query(admin, key="K0").unreachable_broker_groups) == [GROUP_B]
    with pytest.raises(grpc.RpcError) as caught:  # a reset must reach every group: a retry finishes it
        admin.ResetConsumerOffset(
            pb.ResetConsumerOffsetRequest(group="G", topic="Spread", position=pb.RESET_POSITION_LATEST), timeout=30
        )
    assert "broker-b" in caught.value.details() and "run it again" in caught.value.details()


def test_auto_created_topics_are_placed_on_every_group(tmp_path, etcd_server) -> None:
    """auto_create_topic_enable with etcd: an unknown topic goes on every group with its route
    (RocketMQ's brokers each create it from TBW102's route); one already on the home group alone
    stays there; with a group down, it is created on the home group alone."""
    etcd = etcd_server.client()
    try:
        with two_groups(tmp_path, etcd=etcd, registered=(GROUP_A, GROUP_B), auto_create_topic_enable=True) as cluster:
            queues = route_queues(cluster, "Auto1")  # QueryRoute creates it
            assert sorted({(group, permission) for group, _, permission in queues}) == [
                (GROUP_A, "READ_WRITE"),
                (GROUP_B, "READ_WRITE"),
            ]
            assert stored(cluster, GROUP_A, "Auto1") == stored(cluster, GROUP_B, "Auto1") == (8, 8, "MIXED")
            assert list(RouteStore(etcd).get("Auto1").groups) == [GROUP_A, GROUP_B]
            send_ok(cluster.v2, message("Auto2", body=b"first"))  # a send with no QueryRoute creates it too
            assert stored(cluster, GROUP_B, "Auto2") == (8, 8, "MIXED")
            assert cluster.routes_seen(lambda routes: "Auto2" in routes)
            for i in range(4):  # and sends spread over both groups
                send_ok(cluster.v2, message("Auto2", body=b"m%d" % i, message_id=f"A2{i}"))
            depths = [sum(cluster.depth(group, "Auto2", 8)) for group in (GROUP_A, GROUP_B)]
            assert sum(depths) == 5 and min(depths) >= 2, depths
            cluster.stores[GROUP_A].create_topic(TopicInfo("HomeOnly", 2, 2, 6, "MIXED"))
            assert {group for group, _, _ in route_queues(cluster, "HomeOnly")} == {GROUP_A}
            assert stored(cluster, GROUP_B, "HomeOnly") is None
            cluster.stop_store(GROUP_B)
            assert {group for group, _, _ in route_queues(cluster, "Auto3")} == {GROUP_A}
            assert stored(cluster, GROUP_A, "Auto3") == (8, 8, "MIXED") and RouteStore(etcd).get("Auto3") is None
    finally:
        etcd.close()
