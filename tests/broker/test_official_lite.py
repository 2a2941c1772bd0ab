"""Lite messages (RIP-83) sent by the official rocketmq-python-client 5.1.2, unchanged: its lite
producer example's sends to lite topics of a LITE parent are stored once under the parent, each in
its lite topic's queue in order; the client's own refusals and the broker's codes. (Lite consumers
come with the broker's SyncLiteSubscription and lite receive.)"""

from __future__ import annotations

from collections import defaultdict

import pytest

from services.broker.__main__ import build_broker
from services.broker.config import BrokerConfig
from services.runtime.clock import SystemClock
from services.store.client.client import GrpcStoreClient
from services.store.rpc.server import build_server as build_store_server
from services.store.rpc.server import stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config
from tests.support.official_client import produce, run_client
from tests.support.store_reads import stored
from tests.support.topics import create_topics

pytestmark = pytest.mark.needs("rocketmq-python-client")

QUEUES = 4


def test_lite_sends_land_in_their_lite_topics_in_order(broker, store_stub, topics, tmp_path):
    topics("lite-parent", message_type="LITE", queue_nums=QUEUES)
    endpoint = f"127.0.0.1:{broker.port}"
    specs = [{"body": f"{lite}-{i}", "lite_topic": lite} for i in range(4) for lite in ("session-a", "session-b")]
    sent = produce(tmp_path, endpoint, "lite-parent", specs)
    assert len({r["message_id"] for r in sent}) == len(specs)
    records = [m for q in range(QUEUES) for m in stored(store_stub, "lite-parent", q)]
    assert len(records) == len(specs)  # once each, under the parent
    by_lite: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for record in records:
        props = record.properties
        assert props["INNER_MULTI_DISPATCH"] == f"%LMQ%$lite-parent${props['__LITE_TOPIC']}"
        by_lite[props["__LITE_TOPIC"]].append((int(props["INNER_MULTI_QUEUE_OFFSET"]), record.body.decode()))
    for lite in ("session-a", "session-b"):
        assert sorted(by_lite[lite]) == [(i, f"{lite}-{i}") for i in range(4)]  # offsets in the order sent


def test_refusals(broker, store_stub, topics, tmp_path):
    topics("lite-only", message_type="LITE", queue_nums=QUEUES)
    topics("normal-only", message_type="NORMAL", queue_nums=QUEUES)
    endpoint = f"127.0.0.1:{broker.port}"
    results, _ = run_client(
        tmp_path,
        endpoint,
        [
            {"topic": "lite-only", "body": "no lite topic"},
            {"topic": "normal-only", "body": "lite", "lite_topic": "session-a"},
            {"topic": "lite-only", "body": "bad name", "lite_topic": "a.b"},
        ],
        topics=("lite-only", "normal-only"),
    )
    assert [r["ok"] for r in results] == [False, False, False], results
    assert "message type" in results[0]["message"].lower() and "message type" in results[1]["message"].lower()
    assert results[2]["code"] == 40020, results[2]  # ILLEGAL_LITE_TOPIC, from the broker
    assert all(stored(store_stub, t, q) == [] for t in ("lite-only", "normal-only") for q in range(QUEUES))


def test_a_new_lite_topic_past_the_stores_quota_is_42901(tmp_path):
    """A store with lite_topics_max: the official producer's send that would start one more lite
    topic gets LITE_TOPIC_QUOTA_EXCEEDED (42901); the lite topics held keep taking messages."""
    store = FileStore(small_config(tmp_path / "store", lite_topics_max=2), SystemClock())
    store.start()
    server, port = build_store_server(store, "127.0.0.1", 0)
    server.start()
    client = GrpcStoreClient(f"127.0.0.1:{port}")
    broker = build_broker(BrokerConfig(port=0, store_address=f"127.0.0.1:{port}"), client)
    broker.start()
    try:
        create_topics(client, "quota-parent", message_type="LITE", queue_nums=QUEUES)
        endpoint = f"127.0.0.1:{broker.port}"
        results, _ = run_client(
            tmp_path,
            endpoint,
            [{"topic": "quota-parent", "body": f"{lite}", "lite_topic": lite} for lite in ("a", "b", "c", "a")],
            topics=("quota-parent",),
        )
        assert [r["ok"] for r in results] == [True, True, False, True], results
        assert results[2]["code"] == 42901, results[2]
    finally:
        broker.stop(1.0)
        client.close()
        stop_server(server, 1.0)
        store.shutdown()
