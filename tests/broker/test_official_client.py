"""The official rocketmq-python-client 5.1.2, unchanged, against the real store and broker.

The client runs in a subprocess (tests/broker/clients/send.py): its apache.rocketmq.v2 stubs
clash with ours in one process. Store and broker run in this process on 127.0.0.1:0. What
landed is read back through the store's gRPC API.
"""

from __future__ import annotations

import time

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.queue_selection import fifo_queue_id
from tests.support.official_client import run_client
from tests.support.store_reads import stored, wait_stored

pytestmark = pytest.mark.needs("rocketmq-python-client")


def test_producer_send_lands_in_the_store(broker, store_stub, topics, tmp_path):
    topics("ClientTopic")
    results, settings = run_client(
        tmp_path,
        f"127.0.0.1:{broker.port}",
        [
            {
                "topic": "ClientTopic",
                "body": "hello from python",
                "tag": "TagA",
                "keys": ["order-7"],
                "properties": {"color": "red", "size": "L"},
            }
        ],
        topics=("ClientTopic",),
    )
    [result] = results
    assert result["ok"], result
    assert len(result["message_id"]) == 34 and result["message_id"].startswith("01")
    assert result["transaction_id"] == result["message_id"]  # on every send, as from RocketMQ
    # The producer applied our settings reply (an omitted publishing block would mean max 0).
    assert settings == {"max_body_size": 4194304, "validate_message_type": True, "max_attempts": 3}

    [record] = wait_stored(store_stub, "ClientTopic", result["message_id"])
    assert record.body == b"hello from python" and record.queue_offset == result["offset"]
    props = record.properties
    assert props["TAGS"] == "TagA" and props["KEYS"] == "order-7" and props["UNIQ_KEY"] == result["message_id"]
    assert props["color"] == "red" and props["size"] == "L"
    assert props["PGROUP"] == "ClientTopic" and props["CLUSTER"] == "DefaultCluster"
    assert props["__BORNHOST"] and int(props["BORN_TIMESTAMP"]) % 1000 == 0  # Py sends whole seconds
    assert abs(int(props["BORN_TIMESTAMP"]) - time.time() * 1000) < 120_000
    assert [m.properties["UNIQ_KEY"] for m in wait_stored(store_stub, "ClientTopic", "order-7")] == [
        result["message_id"]
    ]


def test_fifo_sends_land_in_the_hashed_queue_consistently(broker, store_stub, topics, tmp_path):
    topics("ClientFifo")
    messages = [
        {"topic": "ClientFifo", "body": f"{group}:{i}", "message_group": group}
        for i in range(4)
        for group in ("order-A", "order-B", "order-C")
    ]
    results, _ = run_client(tmp_path, f"127.0.0.1:{broker.port}", messages, topics=("ClientFifo",))
    assert all(r["ok"] for r in results), results
    for result in results:  # the store's reput thread dispatches just after each put returns
        assert wait_stored(store_stub, "ClientFifo", result["message_id"])
    for group in ("order-A", "order-B", "order-C"):
        queue_id = fifo_queue_id(group, 8)
        bodies = [m.body.decode() for m in stored(store_stub, "ClientFifo", queue_id)]
        assert [b for b in bodies if b.startswith(group)] == [f"{group}:{i}" for i in range(4)]
        for other in set(range(8)) - {queue_id}:
            assert not any(m.body.decode().startswith(group) for m in stored(store_stub, "ClientFifo", other))


def test_client_side_and_server_side_refusals(make_broker, store_stub, topics, tmp_path):
    broker = make_broker()
    topics("ClientTopic")
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="OnlyNormal", message_type=pb.NORMAL)),
        timeout=10,
    )
    results, _ = run_client(
        tmp_path,
        f"127.0.0.1:{broker.port}",
        [
            # the client refuses a body over the max_body_size our settings reply gave it
            {"topic": "ClientTopic", "body_size": 4 * 1024 * 1024 + 1},
            # the route's accept_message_types (NORMAL) make the client refuse a FIFO message locally
            {"topic": "OnlyNormal", "body": "x", "message_group": "g"},
            # delivery_timestamp is in seconds for the Py client; 2 days ahead is refused by the
            # server (delivery_delay_max_ms: 1 day, the proxy's maxDelayTimeMills)
            {"topic": "ClientTopic", "body": "x", "delivery_timestamp": int(time.time()) + 2 * 86400},
            # a system topic passes the client's name check; the server's route query refuses it
            {"topic": "TBW102", "body": "x"},
            # a topic nobody created: its route query is TOPIC_NOT_FOUND (auto-create is off)
            {"topic": "NeverCreated", "body": "x"},
        ],
        topics=("ClientTopic", "OnlyNormal"),
    )
    too_large, wrong_type, too_late, system, missing = results
    assert (too_large["ok"], too_large["error"]) == (False, "IllegalArgumentException")
    assert "max size=4194304" in too_large["message"]
    assert (wrong_type["ok"], wrong_type["error"]) == (False, "IllegalArgumentException")
    assert (too_late["ok"], too_late["error"], too_late["code"]) == (False, "BadRequestException", 40012)
    # (the client reports the route failure without its code; test_rpc checks it is ILLEGAL_TOPIC)
    assert system["ok"] is False and "failed to fetch topic:TBW102 route" in system["message"]
    assert missing["ok"] is False and "failed to fetch topic:NeverCreated route" in missing["message"]
    # The client logs the route reply as its NotFoundException: the code, then our message, which
    # is the proxy's (CODE: 17 ... DESC: ...) and then how to create the topic.
    client_log = (tmp_path / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text()
    assert (
        "40402, CODE: 17  DESC: No topic route info in name server for the topic: NeverCreated, "
        "create it first (pyrmq topic create NeverCreated --type NORMAL)" in client_log
    )


def test_delay_message_is_parked_with_a_recall_handle(broker, store_stub, topics, tmp_path):
    topics("ClientDelay")
    deliver_s = int(time.time()) + 30
    [result], _ = run_client(
        tmp_path,
        f"127.0.0.1:{broker.port}",
        [{"topic": "ClientDelay", "body": "later", "delivery_timestamp": deliver_s}],
        topics=("ClientDelay",),
    )
    assert result["ok"] and result["recall_handle"], result
    [record] = wait_stored(store_stub, "rmq_sys_wheel_timer", result["message_id"])
    assert record.properties["REAL_TOPIC"] == "ClientDelay"
    assert record.properties["TIMER_DELIVER_MS"] == str(deliver_s * 1000)


def test_transaction_commit_and_rollback(broker, store_stub, topics, tmp_path):
    topics("ClientTx")
    results, _ = run_client(
        tmp_path,
        f"127.0.0.1:{broker.port}",
        [
            {"topic": "ClientTx", "body": "committed", "keys": ["tx-commit"], "transaction": "commit"},
            {"topic": "ClientTx", "body": "rolled back", "keys": ["tx-rollback"], "transaction": "rollback"},
        ],
        topics=("ClientTx",),
    )
    committed, rolled_back = results
    assert committed["ok"] and rolled_back["ok"], results
    assert committed["transaction_id"] == committed["message_id"]
    [record] = wait_stored(store_stub, "ClientTx", committed["message_id"])
    assert record.body == b"committed" and record.sys_flag & 0xC == 0x8
    visible = [m.body for q in range(8) for m in stored(store_stub, "ClientTx", q)]
    assert visible == [b"committed"]
