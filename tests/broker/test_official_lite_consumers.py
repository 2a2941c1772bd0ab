"""Lite consumers (RIP-83) of the official rocketmq-python-client 5.1.2, unchanged: its
LiteSimpleConsumer and LitePushConsumer subscribe lite topics of a LITE parent with
SyncLiteSubscription, receive each lite topic's messages in order (a backlog too), and stop
getting a lite topic they unsubscribed; the settings carry the lite quotas."""

from __future__ import annotations

import time

import pytest

from services.store.client.client import GrpcStoreClient
from tests.support.official_client import LiteConsumer, produce

pytestmark = pytest.mark.needs("rocketmq-python-client")

PARENT = "lite-parent"


@pytest.fixture
def broker(make_broker):
    """Long polls from 1 s (the consumers ask 1 s): an empty receive costs 1 s, not 5."""
    return make_broker(long_polling_timeout_ms_min=1_000)


def lite_sends(*specs: tuple[str, int], start: int = 0) -> list[dict]:
    return [{"body": f"{lite}-{i}", "lite_topic": lite} for lite, n in specs for i in range(start, start + n)]


def receive_until(consumer: LiteConsumer, count: int, deadline_s: float = 30, ack: bool = True) -> list[dict]:
    got: list[dict] = []
    end = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < end:
        got += consumer.receive(max=32, invisible_s=20, ack=ack)
    return got


def by_lite(messages: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for message in messages:
        out.setdefault(message["lite_topic"], []).append(message["body"])
    return out


def test_lite_simple_consumer_gets_its_lite_topics_in_order(broker, topics, tmp_path):
    topics(PARENT, message_type="LITE", queue_nums=4)
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, PARENT, lite_sends(("chat-a", 6), ("chat-b", 3), ("chat-c", 2)))  # a backlog
    with LiteConsumer(tmp_path, endpoint, "lite-group", PARENT, await_s=1) as consumer:
        assert consumer.seen[-1]["quota"] == 2000
        assert consumer.ask(op="settings") == {"quota": 2000, "max_lite_topic_size": 64}
        assert consumer.subscribe("chat-a") == {"ok": True} and consumer.subscribe("chat-b") == {"ok": True}
        got = receive_until(consumer, 9)
        assert by_lite(got) == {
            "chat-a": [f"chat-a-{i}" for i in range(6)],
            "chat-b": ["chat-b-0", "chat-b-1", "chat-b-2"],
        }
        assert {(m["topic"], m["message_type"]) for m in got} == {(PARENT, 5)}  # LITE
        # a lite topic subscribed later: its backlog; new messages of subscribed lite topics wake the receive
        assert consumer.subscribe("chat-c") == {"ok": True}
        produce(tmp_path, endpoint, PARENT, lite_sends(("chat-a", 2), start=6))
        got = receive_until(consumer, 4)
        assert by_lite(got) == {"chat-c": ["chat-c-0", "chat-c-1"], "chat-a": ["chat-a-6", "chat-a-7"]}
        # unsubscribed: its new messages are not delivered
        assert consumer.ask(op="unsubscribe", lite_topic="chat-a") == {"ok": True}
        produce(tmp_path, endpoint, PARENT, lite_sends(("chat-a", 1), ("chat-b", 1), start=8))
        got = receive_until(consumer, 1)
        assert by_lite(got) == {"chat-b": ["chat-b-8"]}
        assert consumer.receive(max=32, invisible_s=20) == []


def test_a_lite_topic_waits_for_its_batch_and_redelivers_it_in_order(broker, topics, tmp_path):
    topics(PARENT, message_type="LITE", queue_nums=4)
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, PARENT, lite_sends(("task-1", 2), ("task-2", 1)))
    with LiteConsumer(tmp_path, endpoint, "lite-group", PARENT, await_s=1) as consumer:
        consumer.subscribe("task-1")
        consumer.subscribe("task-2")
        first = receive_until(consumer, 3, ack=False)
        assert by_lite(first) == {"task-1": ["task-1-0", "task-1-1"], "task-2": ["task-2-0"]}
        produce(tmp_path, endpoint, PARENT, lite_sends(("task-1", 1), start=2))
        ids = {m["body"]: m["message_id"] for m in first}
        # task-1's batch is in flight: its new message waits; acking task-2 frees only task-2
        assert consumer.ask(op="ack", ids=[ids["task-2-0"]]) == {"ok": True}
        assert consumer.receive(max=32, invisible_s=20) == []
        # a nack (change of invisible time) of the first: the batch comes back from it, in order
        assert consumer.ask(op="ack", ids=[ids["task-1-1"]]) == {"ok": True}
        assert consumer.ask(op="change", id=ids["task-1-0"], invisible_s=1) == {"ok": True}
        again = receive_until(consumer, 2)
        assert [(m["body"], m["attempt"]) for m in again] == [("task-1-0", 2), ("task-1-2", 1)]


def test_lite_push_consumer_gets_its_lite_topics_and_a_failed_message_again(broker, topics, tmp_path):
    """The client consumes a non-FIFO group's batch concurrently (as it would with RocketMQ): the
    failed message is nacked and comes back with its next attempt, after the batch is settled."""
    topics(PARENT, message_type="LITE", queue_nums=4)
    endpoint = f"127.0.0.1:{broker.port}"
    with LiteConsumer(tmp_path, endpoint, "lite-push-group", PARENT, mode="push", fail_first=1) as consumer:
        assert consumer.seen[-1]["quota"] == 2000
        assert consumer.subscribe("job-7") == {"ok": True}
        produce(tmp_path, endpoint, PARENT, lite_sends(("job-7", 3), ("job-8", 1)))
        pushed = [consumer.next_line("pushed", 60) for _ in range(4)]
        assert sorted((p["pushed"]["body"], p["pushed"]["attempt"], p["result"]) for p in pushed[:3]) == [
            ("job-7-0", 1, "FAILURE"),
            ("job-7-1", 1, "SUCCESS"),
            ("job-7-2", 1, "SUCCESS"),
        ]
        assert (pushed[3]["pushed"]["body"], pushed[3]["pushed"]["attempt"], pushed[3]["result"]) == (
            "job-7-0",
            2,
            "SUCCESS",
        )
        assert {p["pushed"]["lite_topic"] for p in pushed} == {"job-7"}  # job-8 is not subscribed


def test_group_attributes_bind_topic_quota_and_exclusive(broker, topics, store_address, tmp_path):
    """``lite.bind.topic``: another parent is ILLEGAL_TOPIC; ``lite.sub.client.quota`` reaches the
    client in its settings (it refuses the next subscribe itself, 42902); ``lite.sub.model=Exclusive``:
    a lite topic goes to its newest subscriber only."""
    topics(PARENT, "other-parent", message_type="LITE", queue_nums=4)
    store = GrpcStoreClient(store_address)
    try:
        attributes = {"lite.bind.topic": PARENT, "lite.sub.client.quota": "2", "lite.sub.model": "Exclusive"}
        store.update_group("bound-group", False, 16, None, attributes)
    finally:
        store.close()
    endpoint = f"127.0.0.1:{broker.port}"
    with (
        LiteConsumer(tmp_path, endpoint, "bound-group", PARENT, await_s=1) as first,
        LiteConsumer(tmp_path, endpoint, "bound-group", PARENT, await_s=1) as second,
        LiteConsumer(tmp_path, endpoint, "bound-group", "other-parent", await_s=1) as wrong,
    ):
        assert first.seen[-1]["quota"] == 2
        assert first.subscribe("a") == {"ok": True} and first.subscribe("b") == {"ok": True}
        refused = first.subscribe("c")
        assert refused["ok"] is False and refused["code"] == 42902, refused
        refused = wrong.subscribe("a")
        assert refused["ok"] is False and refused["code"] == 40002 and "bind topic" in refused["error"], refused
        assert second.subscribe("a") == {"ok": True}  # takes "a" from the first
        produce(tmp_path, endpoint, PARENT, lite_sends(("a", 1), ("b", 1)))
        assert by_lite(receive_until(second, 1)) == {"a": ["a-0"]}
        assert by_lite(receive_until(first, 1)) == {"b": ["b-0"]}


def test_a_wildcard_group_takes_every_lite_topic_of_its_parent(broker, topics, store_address, tmp_path):
    """``lite.sub.wildcard``: subscribe_lite_all() (a COMPLETE_ADD) gets the backlog of every lite
    topic of the parent and each new one; a single subscribe is refused."""
    topics(PARENT, message_type="LITE", queue_nums=4)
    store = GrpcStoreClient(store_address)
    try:
        store.update_group("wild-group", False, 16, None, {"lite.bind.topic": PARENT, "lite.sub.wildcard": "true"})
    finally:
        store.close()
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, PARENT, lite_sends(("old-1", 2), ("old-2", 1)))
    with LiteConsumer(tmp_path, endpoint, "wild-group", PARENT, await_s=1) as consumer:
        refused = consumer.subscribe("one")
        assert refused["ok"] is False and refused["code"] == 40000 and "wildcard" in refused["error"], refused
        assert consumer.ask(op="subscribe_all") == {"ok": True}
        assert by_lite(receive_until(consumer, 3)) == {"old-1": ["old-1-0", "old-1-1"], "old-2": ["old-2-0"]}
        produce(tmp_path, endpoint, PARENT, lite_sends(("brand-new", 2)))
        assert by_lite(receive_until(consumer, 2)) == {"brand-new": ["brand-new-0", "brand-new-1"]}
