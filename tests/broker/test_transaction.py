"""EndTransaction: commit / rollback of half messages, idempotency (the core on the in-process store;
raw v2 on real servers)."""

from __future__ import annotations

import pytest
from apache.rocketmq.v2 import definition_pb2 as d

from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code
from services.broker.model import IncomingMessage
from services.broker.producer import Producer
from services.broker.put_coalescer import DirectPutSink
from services.broker.topics import TopicRegistry
from services.broker.transaction import HalfMessageTable, HalfRef, Resolution, TransactionService
from services.domain.delivery import MessageType
from services.store.client.model import MessageToPut
from tests.support.store_reads import stored, wait_stored
from tests.support.topics import create_topics
from tests.support.v2_requests import end, message, send

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK


def services(store_client, remember=True):
    """The producer and the transaction service on ``store``, with the topics sent to created."""
    create_topics(store_client, "TxTopic", "OtherTopic")
    config, clock = BrokerConfig(), store_client.clock
    sink = DirectPutSink(store_client.put_messages)
    halves = HalfMessageTable()

    def on_half(tid, topic, outcome):
        if remember:
            halves.remember(tid, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))

    producer = Producer(config, TopicRegistry(config, store_client, clock), sink, clock, on_half)
    return producer, TransactionService(store_client, sink, halves, clock)


def send_half(producer, message_id="TX1", topic="TxTopic"):
    [receipt] = producer.send(
        [
            IncomingMessage(
                topic=topic, body=b"money", message_id=message_id, message_type=MessageType.TRANSACTION, tag="T"
            )
        ],
        "",
        3.0,
    )
    assert receipt.code == Code.OK and receipt.transaction_id == message_id
    return receipt


@pytest.mark.parametrize("remember", [True, False], ids=["from the half table", "from the index"])
def test_commit_appends_to_the_real_queue_and_writes_an_op_record(store_client, remember):
    producer, transactions = services(store_client, remember)
    send_half(producer)
    [half] = store_client.messages("RMQ_SYS_TRANS_HALF_TOPIC")
    transactions.end_transaction("TxTopic", "TX1", COMMIT, 3.0)
    [committed] = store_client.messages("TxTopic")
    assert committed.queue_id == int(half.properties["REAL_QID"]) and committed.body == b"money"
    assert committed.sys_flag & 0xC == 0x8 and committed.prepared_transaction_offset == half.phy_offset
    assert committed.properties == half.properties  # RocketMQ keeps the half's properties on disk
    [op] = store_client.messages("RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert op.queue_id == 0 and op.body == f"{half.queue_offset},".encode() and op.properties["TAGS"] == "d"


def test_rollback_writes_only_the_op_record(store_client):
    producer, transactions = services(store_client)
    send_half(producer)
    transactions.end_transaction("TxTopic", "TX1", ROLLBACK, 3.0)
    assert store_client.messages("TxTopic") == []
    assert len(store_client.messages("RMQ_SYS_TRANS_OP_HALF_TOPIC")) == 1


def test_duplicate_and_conflicting_resolutions_are_idempotent(store_client):
    producer, transactions = services(store_client)
    send_half(producer)
    for resolution in (COMMIT, COMMIT, ROLLBACK):  # client commit, then a check answer, then nonsense
        transactions.end_transaction("TxTopic", "TX1", resolution, 3.0)
    assert len(store_client.messages("TxTopic")) == 1
    assert len(store_client.messages("RMQ_SYS_TRANS_OP_HALF_TOPIC")) == 1


def test_a_commit_found_in_the_index_after_a_restart_is_not_repeated(store_client):
    producer, transactions = services(store_client)
    send_half(producer)
    transactions.end_transaction("TxTopic", "TX1", COMMIT, 3.0)
    _, restarted = services(store_client)  # empty half table and resolved set
    restarted.end_transaction("TxTopic", "TX1", COMMIT, 3.0)
    assert len(store_client.messages("TxTopic")) == 1


def test_every_half_copy_is_listed_in_the_op_record(store_client):
    producer, transactions = services(store_client)
    send_half(producer)
    [half] = store_client.messages("RMQ_SYS_TRANS_HALF_TOPIC")
    # The transaction checker re-appends an unresolved half (same properties, new offsets).
    store_client.append(producer_copy(half))
    transactions.end_transaction("TxTopic", "TX1", COMMIT, 3.0)
    [op] = store_client.messages("RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert op.body == b"0,1,"
    [committed] = store_client.messages("TxTopic")
    assert committed.prepared_transaction_offset == max(
        r.phy_offset for r in store_client.messages("RMQ_SYS_TRANS_HALF_TOPIC")
    )


def producer_copy(half):
    return MessageToPut(
        topic=half.topic, queue_id=0, body=half.body, properties=dict(half.properties), allow_system_topic=True
    )


@pytest.mark.parametrize(
    "topic,tid,code",
    [
        ("TxTopic", "", Code.INVALID_TRANSACTION_ID),
        ("TxTopic", "UNKNOWN", Code.INVALID_TRANSACTION_ID),
        ("OtherTopic", "TX1", Code.INVALID_TRANSACTION_ID),
        ("RMQ_SYS_TRANS_HALF_TOPIC", "TX1", Code.ILLEGAL_TOPIC),
    ],
)
def test_end_transaction_errors(store_client, topic, tid, code):
    producer, transactions = services(store_client)
    send_half(producer)
    with pytest.raises(BrokerError) as caught:
        transactions.end_transaction(topic, tid, COMMIT, 3.0)
    assert caught.value.code == code


def test_unspecified_resolution_does_nothing(store_client):
    producer, transactions = services(store_client)
    send_half(producer)
    calls = len(store_client.puts)
    transactions.end_transaction("TxTopic", "TX1", Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED, 3.0)
    assert len(store_client.puts) == calls
    assert store_client.messages("TxTopic") == store_client.messages("RMQ_SYS_TRANS_OP_HALF_TOPIC") == []


def test_end_transaction_over_grpc(v2, store_stub, topics):
    topics("TxRaw")
    assert send(v2, message(topic="TxRaw", message_id="TXC", message_type=d.TRANSACTION)).status.code == d.OK
    assert send(v2, message(topic="TxRaw", message_id="TXR", message_type=d.TRANSACTION)).status.code == d.OK
    assert all(stored(store_stub, "TxRaw", q) == [] for q in range(8))  # invisible before commit
    assert end(v2, "TxRaw", "TXC", d.COMMIT).status.code == d.OK
    assert end(v2, "TxRaw", "TXC", d.COMMIT, d.SOURCE_SERVER_CHECK).status.code == d.OK  # duplicate: OK
    assert end(v2, "TxRaw", "TXR", d.ROLLBACK).status.code == d.OK
    assert end(v2, "TxRaw", "NOPE", d.COMMIT).status.code == d.INVALID_TRANSACTION_ID
    [committed] = wait_stored(store_stub, "TxRaw", "TXC")
    assert committed.sys_flag & 0xC == 0x8 and committed.body == b"hello"
    assert [m.properties["UNIQ_KEY"] for q in range(8) for m in stored(store_stub, "TxRaw", q)] == ["TXC"]
    ops = stored(store_stub, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, at_least=2)
    assert [m.properties["TAGS"] for m in ops] == ["d", "d"]
