"""ali-ons 3.12.0 (npm, pure JavaScript; tests/remoting/peers/ali_ons_peer.js) against the remoting
door end to end: its producer's SEND_MESSAGE_V2, its push consumers' heartbeats, long-polling
pulls with commit offsets, clustering and broadcasting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.broker.remoting.door import RemotingDoor
from tests.support.remoting_client import rebalanced
from tests.support.remoting_peers import start_peer
from tests.support.waits import wait_until


def produce(door: RemotingDoor, tmp_path: Path, topic: str, messages: list[dict]) -> list[dict]:
    command = {
        "role": "producer",
        "nameSrv": door.context.address,
        "topic": topic,
        "group": "PID_T",
        "messages": messages,
    }
    with start_peer("ali-ons", command, tmp_path / "producer") as producer:
        sent = producer.wait_events("sent", len(messages), timeout_s=30)
        producer.wait_events("done", timeout_s=30)
    return sent


def test_sends_and_a_push_consumer_receives_tags_keys_and_properties(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("OnsT", queue_nums=4)
    messages = [
        {"body": f"hello {i}", "tag": "TagA" if i % 2 else "TagB", "keys": [f"k{i}"], "props": {"color": f"c{i}"}}
        for i in range(6)
    ]
    sent = produce(door, tmp_path, "OnsT", messages)
    assert all(e["status"] == "SEND_OK" for e in sent)
    assert {e["queueId"] for e in sent} <= {0, 1, 2, 3}
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "OnsT",
        "group": "CID_A",
        "subExpression": "TagA",
        "count": 3,
        "suspendMs": 2000,
    }
    with start_peer("ali-ons", command, tmp_path / "consumer") as consumer:
        received = consumer.wait_events("received", 3, timeout_s=60)
    got = sorted((e["body"], e["tags"], e["keys"], e["properties"].get("color")) for e in received)
    assert got == [(f"hello {i}", "TagA", [f"k{i}"], f"c{i}") for i in (1, 3, 5)]
    assert {e["msgId"] for e in received} <= {e["msgId"] for e in sent}


def test_two_consumers_of_a_group_share_the_queues_and_one_takes_over(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("ShareT", queue_nums=4)
    consumer_command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "ShareT",
        "group": "CID_SHARE",
        "suspendMs": 1000,
        "rebalanceMs": 500,
    }
    first = start_peer("ali-ons", consumer_command, tmp_path / "c1")
    second = start_peer("ali-ons", consumer_command, tmp_path / "c2")
    try:
        clients = door.context.clients
        wait_until(lambda: len(clients.consumers("CID_SHARE")) == 2, 30, what="two consumers heartbeating")
        wait_until(
            lambda: rebalanced(door, "CID_SHARE", "ShareT", consumers=2, queues=4), 30, what="the queues shared out"
        )
        produce(door, tmp_path, "ShareT", [{"body": f"a{i}"} for i in range(16)])
        wait_until(lambda: len(first.events("received")) + len(second.events("received")) >= 16, 60, what="16 messages")
        bodies = [e["body"] for e in first.events("received") + second.events("received")]
        assert sorted(bodies) == sorted(f"a{i}" for i in range(16))
        assert first.events("received") and second.events("received"), "both consumers got a share"
        second.stop()
        wait_until(lambda: len(clients.consumers("CID_SHARE")) == 1, 30, what="the second consumer to leave")
        wait_until(lambda: rebalanced(door, "CID_SHARE", "ShareT", consumers=1, queues=4), 30, what="one takes over")
        before = len(first.events("received"))
        produce(door, tmp_path, "ShareT", [{"body": f"b{i}"} for i in range(8)])
        wait_until(lambda: len(first.events("received")) >= before + 8, 60, what="the first to take every queue")
        assert sorted(e["body"] for e in first.events("received")[before:]) == sorted(f"b{i}" for i in range(8))
    finally:
        first.stop()
        second.stop()


def test_broadcasting_consumers_each_receive_everything(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CastT", queue_nums=2)
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "CastT",
        "group": "CID_CAST",
        "model": "BROADCASTING",
        "suspendMs": 1000,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    }
    one = start_peer("ali-ons", command, tmp_path / "b1")
    two = start_peer("ali-ons", command, tmp_path / "b2")
    try:
        # Both pull every queue. (Their client ids are the same: a broadcasting client keeps the
        # instance name DEFAULT, as the Java client does, so the group lists one client.)
        wait_until(lambda: len(door.pulls.held_queues("CID_CAST", "CastT")) == 4, 30, what="two consumers' pulls")
        produce(door, tmp_path, "CastT", [{"body": f"x{i}"} for i in range(4)])
        for consumer in (one, two):
            events = consumer.wait_events("received", 4, timeout_s=60)
            assert sorted(e["body"] for e in events) == [f"x{i}" for i in range(4)]
    finally:
        one.stop()
        two.stop()
