"""The official rocketmq-python-client against one broker over two broker groups (issue 17):
its sends land on both groups' queues, a simple and a push consumer receive everything once,
and a group that dies sends nothing to it while the other takes every send. A real etcd holds
the route; the topic is created with ``Admin.CreateTopic`` as ``pyrmq topic create`` does."""

from __future__ import annotations

import grpc
import pytest
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from tests.support.broker_groups import GROUP_A, GROUP_B, TwoGroups, two_groups
from tests.support.official_client import consume, produce

pytestmark = pytest.mark.needs("etcd")


# The official SimpleConsumer polls the route's queues in turn, broker-a's then broker-b's, so it
# long-polls empty queues many times in a row: 1 s each, not the broker's 5 s minimum.
AWAIT_S = 1


@pytest.fixture
def cluster(tmp_path, etcd_server):
    etcd = etcd_server.client()
    try:
        with two_groups(
            tmp_path / "stores", etcd=etcd, registered=(GROUP_A, GROUP_B), long_polling_timeout_ms_min=AWAIT_S * 1000
        ) as groups:
            yield groups
    finally:
        etcd.close()


def create_topic(cluster: TwoGroups, name: str, queue_nums: int = 4) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{cluster.broker.port}") as channel:
        response = pb_grpc.AdminStub(channel).CreateTopic(
            pb.CreateTopicRequest(name=name, message_type=pb.MIXED, queue_nums=queue_nums), timeout=10
        )
    assert list(response.topic.broker_groups) == [GROUP_A, GROUP_B]
    assert cluster.routes_seen(lambda routes: name in routes)


def stored(cluster: TwoGroups, group: str, topic: str) -> int:
    return sum(cluster.depth(group, topic))


def test_sends_spread_over_both_groups_and_a_simple_consumer_gets_each_once(cluster: TwoGroups, tmp_path) -> None:
    create_topic(cluster, "Spread")
    endpoint = f"127.0.0.1:{cluster.broker.port}"
    bodies = [f"m-{i}" for i in range(24)]
    produce(tmp_path, endpoint, "Spread", [{"body": body, "tag": "T"} for body in bodies])
    assert stored(cluster, GROUP_A, "Spread") + stored(cluster, GROUP_B, "Spread") == 24
    assert stored(cluster, GROUP_A, "Spread") > 0 and stored(cluster, GROUP_B, "Spread") > 0
    got = consume(
        tmp_path, endpoint, group="SpreadGroup", topic="Spread", count=24, deadline_s=60, await_s=AWAIT_S, action="ack"
    )
    assert sorted(m["body"] for m in got) == sorted(bodies)
    assert all(m["acked"] is True and m["attempt"] == 1 for m in got), got


def test_a_push_consumer_gets_every_message_of_both_groups_once(cluster: TwoGroups, tmp_path) -> None:
    create_topic(cluster, "Pushed")
    endpoint = f"127.0.0.1:{cluster.broker.port}"
    bodies = [f"p-{i}" for i in range(16)]
    produce(tmp_path, endpoint, "Pushed", [{"body": body} for body in bodies])
    assert stored(cluster, GROUP_A, "Pushed") > 0 and stored(cluster, GROUP_B, "Pushed") > 0
    got = consume(
        tmp_path, endpoint, mode="push", group="PushGroup", topic="Pushed", count=16, deadline_s=60, linger_s=2
    )
    assert sorted(m["body"] for m in got) == sorted(bodies)  # linger: a duplicate would show


def test_a_dead_group_gets_no_sends_and_the_other_takes_them(cluster: TwoGroups, tmp_path) -> None:
    create_topic(cluster, "Survive")
    endpoint = f"127.0.0.1:{cluster.broker.port}"
    cluster.stop_store(GROUP_B)
    results = produce(tmp_path, endpoint, "Survive", [{"body": f"s-{i}"} for i in range(12)])
    assert len(results) == 12
    assert stored(cluster, GROUP_A, "Survive") == 12
