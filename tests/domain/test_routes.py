"""Topic routes over broker groups (services/domain/routes.py): RocketMQ's QueueData JSON, the
proxy's queue order, FIFO queues that never move while groups come and go, round-robin that
skips a group that is down."""

from __future__ import annotations

import json

import pytest

from services.domain.routes import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    QueueData,
    TopicRoute,
    message_group_bucket,
    readable_groups,
    select_write_queue,
)


def two_groups(queues: int = 4) -> TopicRoute:
    return TopicRoute("Orders", "FIFO", (QueueData("broker-b", queues, queues), QueueData("broker-a", queues, queues)))


def test_the_route_round_trips_in_rocketmqs_json_names_and_sorts_its_groups():
    route = two_groups()
    assert route.groups == ["broker-a", "broker-b"]
    assert TopicRoute.decode(route.encode()) == route
    [first, _] = json.loads(route.encode())["queueDatas"]
    assert first == {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
    for bad in (b"", b"[]", b'{"queueDatas": []}', b'{"topic": "T", "queueDatas": [{"brokerName": "a"}]}'):
        with pytest.raises(ValueError):
            TopicRoute.decode(bad)
    with pytest.raises(ValueError):
        TopicRoute("T", "NORMAL", (QueueData("a", 1, 1), QueueData("a", 2, 2)))


def test_queues_are_in_the_proxys_order_and_permissions_decide_which():
    route = TopicRoute(
        "T", "NORMAL", (QueueData("g2", 2, 1, PERM_READ), QueueData("g1", 1, 2, PERM_WRITE), QueueData("g3", 1, 1))
    )
    assert route.write_queues() == [("g1", 0), ("g1", 1), ("g3", 0)]
    assert route.read_queues() == [("g2", 0), ("g2", 1), ("g3", 0)]
    assert readable_groups(route) == ["g2", "g3"] and readable_groups(route, ["g3", "g1"]) == ["g3"]


def test_round_robin_spreads_over_every_group_and_skips_one_that_is_down():
    route = two_groups(2)
    picked = [select_write_queue(route, i) for i in range(4)]
    assert picked == [("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1)]  # groups alternate
    uneven = TopicRoute("T", "NORMAL", (QueueData("broker-a", 1, 1), QueueData("broker-b", 3, 3)))
    assert [select_write_queue(uneven, i) for i in range(4)] == [
        ("broker-a", 0),
        ("broker-b", 0),
        ("broker-b", 1),
        ("broker-b", 2),
    ]  # every queue once per round, whatever each group has
    down = {"broker-a"}
    assert {select_write_queue(route, i, up=lambda g: g not in down) for i in range(4)} == {
        ("broker-b", 0),
        ("broker-b", 1),
    }
    assert select_write_queue(route, 0, up=lambda g: False) is None
    assert select_write_queue(TopicRoute("T", "NORMAL"), 0) is None


def test_a_message_group_keeps_its_queue_while_a_group_is_down():
    route = two_groups()
    queues = route.write_queues()
    for group in (f"order-{i}" for i in range(50)):
        fixed = select_write_queue(route, 0, group)
        assert fixed is not None and fixed == queues[message_group_bucket(group, len(queues))]
        down = fixed[0]
        assert select_write_queue(route, 7, group, up=lambda g, down=down: g != down) == fixed  # never moved


def test_adding_a_group_moves_few_message_groups():
    before, after = two_groups(), two_groups().with_group(QueueData("broker-c", 4, 4))
    assert after.group("broker-c") == QueueData("broker-c", 4, 4, PERM_READ_WRITE)
    groups = [f"order-{i}" for i in range(1000)]
    moved = sum(1 for g in groups if select_write_queue(before, 0, g) != select_write_queue(after, 0, g))
    assert moved < 1000 * 0.45  # consistent hashing: about a third move to the new group's queues
    assert after.without_group("broker-c") == before
