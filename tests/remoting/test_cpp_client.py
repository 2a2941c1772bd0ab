"""rocketmq-client-python 0.5.0rc2 (PyPI; Apache's ctypes binding of rocketmq-client-cpp, driven by
tests/remoting/peers/cpp_peer.py) against the remoting door end to end: SEND_MESSAGE (long
header names, numbers and strings mixed), push consumers, orderly sends and orderly consumption
(LOCK_BATCH_MQ)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.broker.remoting.door import RemotingDoor
from tests.support.remoting_client import rebalanced
from tests.support.remoting_peers import start_peer
from tests.support.waits import wait_until


def produce(door: RemotingDoor, tmp_path: Path, topic: str, messages: list[dict], **extra: object) -> list[dict]:
    command = {
        "role": "producer",
        "nameSrv": door.context.address,
        "topic": topic,
        "group": "PID_CPP",
        "messages": messages,
        **extra,
    }
    with start_peer("cpp", command, tmp_path / "producer") as producer:
        sent = producer.wait_events("sent", len(messages), timeout_s=30)
        producer.wait_events("done", timeout_s=30)
    return sent


def test_sync_sends_reach_a_push_consumer_with_tags_keys_and_properties(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CppT", queue_nums=4)
    messages = [{"body": f"cpp {i}", "tag": "T1", "keys": [f"key{i}"], "props": {"color": f"c{i}"}} for i in range(5)]
    sent = produce(door, tmp_path, "CppT", messages)
    assert all(e["status"] == "OK" for e in sent), sent
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "CppT",
        "group": "GID_CPP",
        "subExpression": "T1",
        "count": 5,
        "readProps": ["color"],
    }
    with start_peer("cpp", command, tmp_path / "consumer") as consumer:
        received = consumer.wait_events("received", 5, timeout_s=60)
    got = sorted((e["body"], e["tags"], e["keys"], e["properties"].get("color")) for e in received)
    assert got == [(f"cpp {i}", "T1", [f"key{i}"], f"c{i}") for i in range(5)]
    assert {e["msgId"] for e in received} == {e["msgId"] for e in sent}


def test_orderly_sends_keep_each_sharding_key_in_order(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CppOrderT", queue_nums=4)
    messages = [{"body": f"{key}-{i}", "shardingKey": key} for i in range(6) for key in ("order-a", "order-b")]
    sent = produce(door, tmp_path, "CppOrderT", messages, orderly=True)
    assert all(e["status"] == "OK" for e in sent), sent
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "CppOrderT",
        "group": "GID_ORDER",
        "orderly": True,
        "count": 12,
    }
    with start_peer("cpp", command, tmp_path / "consumer") as consumer:
        received = consumer.wait_events("received", 12, timeout_s=60)
    for key in ("order-a", "order-b"):
        of_key = [e for e in received if e["body"].startswith(key)]
        assert [e["body"] for e in of_key] == [f"{key}-{i}" for i in range(6)]
        assert len({e["queueId"] for e in of_key}) == 1


def test_two_cpp_consumers_share_the_queues_and_one_takes_over(
    door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CppShareT", queue_nums=4)
    command = {"role": "push-consumer", "nameSrv": door.context.address, "topic": "CppShareT", "group": "GID_SHARE"}
    first = start_peer("cpp", command, tmp_path / "c1")
    second = start_peer("cpp", command, tmp_path / "c2")
    try:
        clients = door.context.clients
        wait_until(lambda: len(clients.consumers("GID_SHARE")) == 2, 60, what="two consumers heartbeating")
        wait_until(lambda: rebalanced(door, "GID_SHARE", "CppShareT", 2, 4), 60, what="the queues shared out")
        produce(door, tmp_path, "CppShareT", [{"body": f"a{i}"} for i in range(16)])
        wait_until(lambda: len(first.events("received")) + len(second.events("received")) >= 16, 60, what="16")
        assert first.events("received") and second.events("received"), "both consumers got a share"
        # Killed, not stopped: the binding's shutdown first waits out its held pulls (15 s).
        second.popen.kill()
        wait_until(lambda: len(clients.consumers("GID_SHARE")) == 1, 60, what="the second consumer to leave")
        wait_until(lambda: rebalanced(door, "GID_SHARE", "CppShareT", 1, 4), 60, what="one takes every queue")
        before = len(first.events("received"))
        produce(door, tmp_path, "CppShareT", [{"body": f"b{i}"} for i in range(8)])
        wait_until(lambda: len(first.events("received")) >= before + 8, 60, what="the first to get the rest")
        assert sorted(e["body"] for e in first.events("received")[before:]) == sorted(f"b{i}" for i in range(8))
    finally:
        first.stop()
        second.stop()
