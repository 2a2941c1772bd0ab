"""rocketmq-client-python 0.5.0rc2 (PyPI; Apache's ctypes binding of rocketmq-client-cpp, driven by
tests/remoting/peers/cpp_peer.py) against the remoting door end to end: SEND_MESSAGE (long
header names, numbers and strings mixed), push consumers, orderly sends and orderly consumption
(LOCK_BATCH_MQ)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.broker.remoting.door import RemotingDoor
from tests.support.remoting_peers import start_peer


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
