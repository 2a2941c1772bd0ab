"""kill -9 of the store with many lite topics (issue 18), with the official Python client's lite
producer and LiteSimpleConsumer through a broker that stays up (SYNC flush).

Before the kill: 300 lite topics of one LITE parent hold 4 messages each, and a consumer has
acked the first 2 of each of 20 lite topics and holds the third in flight. After the restart:
every acknowledged send is in its lite topic at its offset (the lite index agrees with a rebuild
from the CommitLog: the same lite topics, offsets and records), the group's committed offsets
are where its acks left them, and the same consumer gets each of its lite topics' rest in order,
the in-flight message again, nothing it acked."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from tests.faults.cluster import Cluster
from tests.support.fault_runs import start_cluster
from tests.support.official_client import LiteConsumer, produce
from tests.support.processes import Process

pytestmark = pytest.mark.needs("rocketmq-python-client")

PARENT = "FaultsLite"
GROUP = "FaultsLiteGroup"
LITE_TOPICS = 300
PER_TOPIC = 4
CONSUMED = 20


def listing(cluster: Cluster, group: str = "") -> dict[str, tuple[int, int, int]]:
    """lite topic -> (min offset, max offset, the group's offset), every page."""
    out: dict[str, tuple[int, int, int]] = {}
    with grpc.insecure_channel(cluster.store_address) as channel:
        stub = pb_grpc.StoreStub(channel)
        after = ""
        while True:
            request = pb.ListLiteTopicsRequest(parent_topic=PARENT, group=group, after=after, limit=100)
            response = stub.ListLiteTopics(request, timeout=10)
            out.update({t.lite_topic: (t.min_offset, t.max_offset, t.consumer_offset) for t in response.lite_topics})
            after = response.next_after
            if not after:
                return out


def records(cluster: Cluster, lite: str) -> list[bytes]:
    with grpc.insecure_channel(cluster.store_address) as channel:
        request = pb.GetMessagesRequest(topic=f"%LMQ%${PARENT}${lite}", queue_id=0, queue_offset=0, max_count=32)
        return [m.body for m in pb_grpc.StoreStub(channel).GetMessages(request, timeout=10).messages]


def test_kill_9_store_with_many_lite_topics(tmp_path: Path, processes: list[Process]) -> None:
    cluster = start_cluster(tmp_path, processes, services=("store", "broker"))
    cluster.create_topic(PARENT, "LITE", queues=4)
    endpoint = cluster.endpoint
    names = [f"chat-{i:03d}" for i in range(LITE_TOPICS)]
    sends = [{"body": f"{name}/{n}", "lite_topic": name} for n in range(PER_TOPIC) for name in names]
    produce(tmp_path, endpoint, PARENT, sends)  # every send acknowledged (SYNC flush)
    subscribed = names[:CONSUMED]
    with LiteConsumer(tmp_path, endpoint, GROUP, PARENT, timeout=10) as consumer:
        for name in subscribed:
            assert consumer.subscribe(name) == {"ok": True}
        taken: dict[str, list[str]] = {}
        while sum(len(v) for v in taken.values()) < CONSUMED * 2:  # batches of 2: one lite topic each
            for m in consumer.receive(max=2, invisible_s=20, ack=False):
                taken.setdefault(m["lite_topic"], []).append(m["message_id"])
        # ack the first two of each lite topic (one batch each), keep nothing else in flight
        assert all(len(ids) == 2 for ids in taken.values()) and len(taken) == CONSUMED, taken
        assert consumer.ask(op="ack", ids=[i for ids in taken.values() for i in ids]) == {"ok": True}
        third = []
        while len(third) < CONSUMED:  # the third message of each, held in flight over the kill
            third += consumer.receive(max=1, invisible_s=10, ack=False)
        before = listing(cluster, GROUP)
        assert len(before) == LITE_TOPICS and all(v[:2] == (0, PER_TOPIC) for v in before.values())
        assert {name: before[name][2] for name in subscribed} == dict.fromkeys(subscribed, 2)

        cluster.kill("store")
        cluster.spawn("store")

        after = listing(cluster, GROUP)
        assert after == before  # every acknowledged send in place, the group's offsets as acked
        # the rest of each subscribed lite topic, in order: the in-flight third again, then the fourth
        rest: dict[str, list[str]] = {}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in rest.values()) < CONSUMED * 2 and time.monotonic() < deadline:
            answer = consumer.ask(op="receive", max=32, invisible_s=20)
            if "messages" not in answer:  # the broker's channel to the new store is still reconnecting
                assert answer["code"] == 50001 and "UNAVAILABLE" in answer["error"], answer
                time.sleep(0.2)  # the broker is still reconnecting: ask again shortly
                continue
            for m in answer["messages"]:
                rest.setdefault(m["lite_topic"], []).append(m["body"])
        assert rest == {name: [f"{name}/2", f"{name}/3"] for name in subscribed}
    sample = [names[0], names[150], names[-1]]
    kept = {name: records(cluster, name) for name in sample}

    # the lite index after the kill is what the CommitLog gives when it is rebuilt
    cluster.kill("store")
    shutil.rmtree(tmp_path / "data" / "store" / "lite")
    cluster.spawn("store")
    assert {k: v[:2] for k, v in listing(cluster).items()} == {k: v[:2] for k, v in after.items()}
    assert {name: records(cluster, name) for name in sample} == kept
    assert kept[names[0]] == [f"{names[0]}/{n}".encode() for n in range(PER_TOPIC)]
