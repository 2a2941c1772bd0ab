"""The official rocketmq-python-client 5.1.2 consumers, unchanged, against the real store and broker.

Messages are produced with tests/broker/clients/send.py and consumed with
tests/broker/clients/consume.py, each in a subprocess (the client's stubs clash with ours).
"""

from __future__ import annotations

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from tests.support.official_client import consume, produce

pytestmark = pytest.mark.needs("rocketmq-python-client")


def test_simple_consumer_tag_filter_and_ack(broker, topics, tmp_path):
    topics("SimpleTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    sent = produce(
        tmp_path,
        endpoint,
        "SimpleTopic",
        [
            {"body": "a-1", "tag": "TagA", "keys": ["k-1"], "properties": {"color": "red"}},
            {"body": "b-1", "tag": "TagB"},
            {"body": "a-2", "tag": "TagA"},
            {"body": "fifo", "tag": "TagA", "message_group": "order-9"},
        ],
    )
    got = consume(
        tmp_path,
        endpoint,
        group="SimpleGroup",
        topic="SimpleTopic",
        expression="TagA",
        count=3,
        deadline_s=30,
        await_s=5,
        action="ack",
    )
    assert sorted(m["body"] for m in got) == ["a-1", "a-2", "fifo"]
    assert all(m["acked"] is True and m["tag"] == "TagA" and m["attempt"] == 1 for m in got), got
    first = next(m for m in got if m["body"] == "a-1")
    assert first["message_id"] == sent[0]["message_id"] and first["keys"] == ["k-1"]
    assert first["properties"] == {"color": "red"}
    fifo = next(m for m in got if m["body"] == "fifo")
    # The group is also among the properties, as the proxy passes __SHARDINGKEY through.
    assert fifo["message_group"] == "order-9" and fifo["properties"] == {"__SHARDINGKEY": "order-9"}


def test_simple_consumer_change_invisible_duration_then_ack(broker, topics, tmp_path):
    topics("ChangeTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, "ChangeTopic", [{"body": "slow"}])
    [got] = consume(
        tmp_path, endpoint, group="ChangeGroup", topic="ChangeTopic", count=1, deadline_s=30, action="change_then_ack"
    )
    assert got["acked"] is True and got["error"] is None, got


def test_unacked_message_is_redelivered_with_attempt_2(make_broker, topics, tmp_path):
    # 2 s invisible time and 1 s long polls rather than the broker's 10 s and 5 s minimums: the
    # same redelivery, without waiting out 10 s.
    broker = make_broker(invisible_duration_ms_min=2_000, long_polling_timeout_ms_min=1_000)
    topics("RedeliverTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, "RedeliverTopic", [{"body": "again"}])
    got = consume(
        tmp_path,
        endpoint,
        group="RedeliverGroup",
        topic="RedeliverTopic",
        count=2,
        deadline_s=40,
        invisible_s=2,
        await_s=1,
        action="none_then_ack",
    )
    assert [(m["body"], m["attempt"], m["acked"]) for m in got] == [("again", 1, None), ("again", 2, True)]
    assert got[0]["message_id"] == got[1]["message_id"]


def test_push_consumer_receives_and_acks(broker, store_stub, topics, tmp_path):
    topics("PushTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, "PushTopic", [{"body": f"p-{i}", "tag": "T"} for i in range(3)])
    got = consume(tmp_path, endpoint, mode="push", group="PushGroup", topic="PushTopic", count=3, deadline_s=40)
    assert sorted(m["body"] for m in got) == ["p-0", "p-1", "p-2"]
    assert all(m["attempt"] == 1 for m in got)
    # acked: the group's committed offsets cover all three messages
    total = 0
    for queue_id in range(8):
        response = store_stub.QueryConsumerOffset(
            pb.QueryConsumerOffsetRequest(group="PushGroup", topic="PushTopic", queue_id=queue_id), timeout=10
        )
        total += max(0, response.offset)
    assert total == 3


def test_fifo_push_consumer_keeps_group_order(broker, store_stub, topics, tmp_path):
    topics("FifoPushTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(
            config=pb.SubscriptionGroupConfig(group_name="FifoPushGroup", consume_message_orderly=True)
        ),
        timeout=10,
    )
    produce(
        tmp_path,
        endpoint,
        "FifoPushTopic",
        [{"body": f"{group}:{i}", "message_group": group} for i in range(3) for group in ("g-A", "g-B")],
    )
    got = consume(tmp_path, endpoint, mode="push", group="FifoPushGroup", topic="FifoPushTopic", count=6, deadline_s=40)
    for group in ("g-A", "g-B"):
        assert [m["body"] for m in got if m["message_group"] == group] == [f"{group}:{i}" for i in range(3)]
