"""Lite messages (RIP-83) sent by the official rocketmq-python-client 5.1.2, unchanged: its lite
producer example's sends to lite topics of a LITE parent are stored once under the parent, each in
its lite topic's queue in order; the client's own refusals and the broker's codes. (Lite consumers
come with the broker's SyncLiteSubscription and lite receive.)"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.support.official_client import produce, run_client
from tests.support.store_reads import stored

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
