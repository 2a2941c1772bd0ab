"""Priority messages (RIP-80) with the official rocketmq-python-client 5.1.2, unchanged, against the
real store and broker: the client's priority example (priorities 0-9 to a PRIORITY topic), a
backlog received highest priority first by a simple consumer, a push consumer, redelivery and the
dead-letter queue keeping the priority, and the refusals the client meets."""

from __future__ import annotations

import random

import pytest
from prometheus_client import generate_latest
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.metrics import BrokerMetrics
from tests.support.official_client import consume, produce, run_client
from tests.support.store_reads import stored

pytestmark = pytest.mark.needs("rocketmq-python-client")

LEVELS = 10  # a PRIORITY topic's default: priorities 0-9, a queue each
PRIORITY_MESSAGE = 6  # apache.rocketmq.v2.MessageType.PRIORITY


def create_group(store_stub, name: str, **config) -> None:
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name=name, **config)), timeout=10
    )


def test_the_priority_example_sends_each_priority_to_its_level(make_broker, store_stub, topics, tmp_path):
    """rocketmq-clients' python/example/priority_producer_example.py: priorities 0-9, one message each."""
    metrics = BrokerMetrics()
    broker = make_broker(metrics=metrics)
    topics("priority-topic", message_type="PRIORITY", queue_nums=LEVELS)
    endpoint = f"127.0.0.1:{broker.port}"
    sent = produce(tmp_path, endpoint, "priority-topic", [{"body": f"p{i}", "priority": i} for i in range(LEVELS)])
    assert all(r["ok"] for r in sent)
    for level in range(LEVELS):
        [record] = stored(store_stub, "priority-topic", level, at_least=1)
        assert record.body == f"p{level}".encode()
        assert record.properties["_SYS_MSG_PRIORITY_"] == str(level)
    scrape = generate_latest(metrics.registry).decode()
    for level in range(LEVELS):
        assert f'pyrmq_priority_messages_in_total{{priority="{level}",topic="priority-topic"}} 1.0' in scrape
    assert 'rocketmq_messages_in_total{message_type="PRIORITY",topic="priority-topic"} 10.0' in scrape


def test_a_backlog_is_received_highest_priority_first(broker, topics, tmp_path):
    topics("PriorityBacklog", message_type="PRIORITY", queue_nums=LEVELS)
    endpoint = f"127.0.0.1:{broker.port}"
    priorities = [p for p in range(LEVELS) for _ in range(3)] + [15, 99]  # above 9: stored at level 9
    random.Random(7).shuffle(priorities)
    produce(
        tmp_path, endpoint, "PriorityBacklog", [{"body": f"m{i}-p{p}", "priority": p} for i, p in enumerate(priorities)]
    )
    got = consume(
        tmp_path,
        endpoint,
        group="PriorityReader",
        topic="PriorityBacklog",
        count=len(priorities),
        max_messages=1,
        deadline_s=60,
        await_s=2,
    )
    received = [m["priority"] for m in got]
    levels = [min(p, LEVELS - 1) for p in received]
    assert levels == sorted(levels, reverse=True), received  # one at a time, never a lower level first
    assert sorted(received) == sorted(priorities)  # each once, with the priority it was sent with
    assert all(m["message_type"] == PRIORITY_MESSAGE and m["acked"] for m in got)


def test_a_batch_receive_is_filled_from_the_top(broker, topics, tmp_path):
    topics("PriorityBatch", message_type="PRIORITY", queue_nums=LEVELS)
    endpoint = f"127.0.0.1:{broker.port}"
    priorities = [1, 8, 3, 8, 0, 5, 9, 2] * 6
    produce(tmp_path, endpoint, "PriorityBatch", [{"body": f"m{i}", "priority": p} for i, p in enumerate(priorities)])
    got = consume(
        tmp_path, endpoint, group="PriorityBatchReader", topic="PriorityBatch", count=len(priorities), deadline_s=60
    )
    # receives of up to 32: the first holds the 32 most urgent, the rest the others
    assert sorted((m["priority"] for m in got[:32]), reverse=True) == sorted(priorities, reverse=True)[:32]
    assert sorted(m["priority"] for m in got) == sorted(priorities)


def test_push_consumer_gets_every_priority_message_once(broker, topics, tmp_path):
    topics("PriorityPush", message_type="PRIORITY", queue_nums=LEVELS)
    endpoint = f"127.0.0.1:{broker.port}"
    sent = produce(tmp_path, endpoint, "PriorityPush", [{"body": f"m{i}", "priority": i % 12} for i in range(24)])
    got = consume(
        tmp_path, endpoint, mode="push", group="PriorityPushGroup", topic="PriorityPush", count=24, deadline_s=60
    )
    assert sorted(m["message_id"] for m in got) == sorted(r["message_id"] for r in sent)
    assert sorted(m["priority"] for m in got) == sorted(i % 12 for i in range(24))


def test_redelivery_and_the_dead_letter_queue_keep_the_priority(broker, store_stub, topics, tmp_path):
    topics("PriorityRetry", message_type="PRIORITY", queue_nums=LEVELS)
    create_group(store_stub, "PriorityRetryGroup", retry_max_times=1)  # 2 deliveries, then the DLQ
    endpoint = f"127.0.0.1:{broker.port}"
    [sent] = produce(tmp_path, endpoint, "PriorityRetry", [{"body": "urgent", "priority": 7}])
    got = consume(
        tmp_path,
        endpoint,
        group="PriorityRetryGroup",
        topic="PriorityRetry",
        count=2,
        deadline_s=30,
        await_s=2,
        action="nack",
    )
    assert [(m["body"], m["attempt"], m["priority"], m["message_type"]) for m in got] == [
        ("urgent", 1, 7, PRIORITY_MESSAGE),
        ("urgent", 2, 7, PRIORITY_MESSAGE),
    ]
    [dead] = stored(store_stub, "%DLQ%PriorityRetryGroup", 0, at_least=1)
    assert dead.body == b"urgent" and dead.properties["_SYS_MSG_PRIORITY_"] == "7"
    assert dead.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent["message_id"]


def test_refusals_the_client_meets(broker, store_stub, topics, tmp_path):
    topics("PriorityOnly", message_type="PRIORITY", queue_nums=LEVELS)
    topics("NormalOnly", message_type="NORMAL")
    endpoint = f"127.0.0.1:{broker.port}"
    results, _ = run_client(
        tmp_path,
        endpoint,
        [
            {"topic": "PriorityOnly", "body": "no priority"},
            {"topic": "NormalOnly", "body": "with priority", "priority": 3},
        ],
        topics=("PriorityOnly", "NormalOnly"),
    )
    # the route's accept_message_types ([PRIORITY], [NORMAL]): the client refuses both itself
    assert [r["ok"] for r in results] == [False, False], results
    assert all("message type" in r["message"].lower() for r in results), results
    assert all(stored(store_stub, "PriorityOnly", q) == [] for q in range(LEVELS))
    assert stored(store_stub, "NormalOnly", 0) == []
