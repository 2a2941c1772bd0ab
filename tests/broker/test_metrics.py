"""Broker metrics over real servers: RPC latency by method and in-band code, traffic and message
sizes by topic, transactions resolved, and the store's figures: consumer lag, in-flight, ready and
dead-lettered messages by group, open transactions (half messages) by real topic."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from prometheus_client import generate_latest

from services.broker.metrics import BrokerMetrics
from services.store.client.client import GrpcStoreClient
from services.store.client.model import TopicInfo
from tests.support.v2_requests import METADATA, ack, end, message, receive, send, send_ok
from tests.support.waits import wait_until

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def v2m(make_broker, metrics: BrokerMetrics) -> Iterator[s_grpc.MessagingServiceStub]:
    # An empty receive below polls its 1 s, not the broker's 5 s minimum.
    broker = make_broker(metrics=metrics, long_polling_timeout_ms_min=1_000)
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield s_grpc.MessagingServiceStub(channel)


def sample(metrics: BrokerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_rpc_latency_is_labelled_with_the_in_band_code(v2m, metrics, topics):
    topics("MTopic", "EmptyTopic")
    send_ok(v2m, message("MTopic", body=b"12345"))
    assert send(v2m, message("bad topic!")).status.code == d.ILLEGAL_TOPIC
    assert sample(metrics, "rocketmq_rpc_latency_seconds_count", method=SEND, code="OK") == 1
    assert sample(metrics, "rocketmq_rpc_latency_seconds_count", method=SEND, code="ILLEGAL_TOPIC") == 1
    status, _, _ = receive(v2m, "EmptyTopic", polling_s=1)  # a stream: labelled with its status element
    assert status.code == d.MESSAGE_NOT_FOUND
    assert sample(metrics, "rocketmq_rpc_latency_seconds_count", method=RECEIVE, code="MESSAGE_NOT_FOUND") == 1
    assert receive(v2m, "EmptyTopic", group="bad group!")[0].code == d.ILLEGAL_CONSUMER_GROUP
    assert sample(metrics, "rocketmq_rpc_latency_seconds_count", method=RECEIVE, code="ILLEGAL_CONSUMER_GROUP") == 1


def test_messages_and_bytes_in_and_out_by_topic(v2m, metrics, topics):
    topics("MTopic", "MFifo")
    send_ok(v2m, message("MTopic", body=b"12345"), message("MTopic", body=b"678", message_id="ID2"))
    send_ok(v2m, message("MFifo", body=b"f", message_id="ID3", message_type=d.FIFO, message_group="g"))
    assert send(v2m, message("bad topic!")).status.code == d.ILLEGAL_TOPIC  # refused: not counted
    assert sample(metrics, "rocketmq_messages_in_total", topic="MTopic", message_type="NORMAL") == 2
    assert sample(metrics, "rocketmq_throughput_in_total", topic="MTopic") == 8
    assert sample(metrics, "rocketmq_messages_in_total", topic="MFifo", message_type="FIFO") == 1
    assert sample(metrics, "rocketmq_messages_in_total", topic="bad topic!", message_type="NORMAL") == 0

    _, got, _ = receive(v2m, "MTopic", group="MGroup")
    while len(got) < 2:
        got += receive(v2m, "MTopic", group="MGroup")[1]
    assert all(ack(v2m, "MTopic", m.system_properties.receipt_handle, group="MGroup").status.code == d.OK for m in got)
    assert sample(metrics, "rocketmq_messages_out_total", topic="MTopic", consumer_group="MGroup") == 2
    assert sample(metrics, "rocketmq_throughput_out_total", topic="MTopic", consumer_group="MGroup") == 8
    assert b'rocketmq_messages_out_total{consumer_group="MGroup",topic="MTopic"} 2.0' in generate_latest(
        metrics.registry
    )


def test_calls_without_a_v2_status_keep_the_grpc_code(make_broker, metrics):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    broker = make_broker(metrics=metrics)
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert sample(metrics, "rocketmq_rpc_latency_seconds_count", method="/grpc.health.v1.Health/Check", code="OK") == 1


def test_consumer_lag_and_in_flight_by_group_come_from_the_store(v2m, metrics, topics):
    topics("LagTopic")
    send_ok(v2m, *(message("LagTopic", body=b"x", message_id=f"LAG{i}") for i in range(5)))
    got: list = []
    while len(got) < 3:
        got += receive(v2m, "LagTopic", group="LagGroup", batch_size=3 - len(got))[1]
    assert ack(v2m, "LagTopic", got[0].system_properties.receipt_handle, group="LagGroup").status.code == d.OK
    # 5 sent, 1 acked: 4 not acknowledged, 2 of them in flight
    assert sample(metrics, "rocketmq_consumer_lag_messages", consumer_group="LagGroup", topic="LagTopic") == 4
    assert sample(metrics, "rocketmq_consumer_inflight_messages", consumer_group="LagGroup", topic="LagTopic") == 2


@pytest.fixture
def create_topics(store_address: str) -> Iterator:
    client = GrpcStoreClient(store_address)

    def create(*names: str, message_type: str = "NORMAL", queues: int = 1) -> None:
        for name in names:
            client.create_topic(TopicInfo(name, queues, queues, 6, message_type))

    yield create
    client.close()


def test_message_sizes_land_in_rocketmqs_buckets(v2m, metrics, create_topics):
    create_topics("SizeTopic")
    create_topics("SizeFifo", message_type="FIFO")
    sizes = (1, 1024, 1025, 4096, 600 * 1024, (1 << 20) + 1, 3 << 20)
    send_ok(v2m, *(message("SizeTopic", body=b"x" * n, message_id=f"SIZE{n}") for n in sizes))
    send_ok(v2m, message("SizeFifo", body=b"f" * 2000, message_id="SIZEF", message_type=d.FIFO, message_group="g"))
    assert send(v2m, message("bad topic!", body=b"x")).status.code == d.ILLEGAL_TOPIC  # refused: not observed

    def bucket(le: str, topic: str = "SizeTopic", message_type: str = "NORMAL") -> float:
        return sample(metrics, "rocketmq_message_size_bucket", topic=topic, message_type=message_type, le=le)

    # cumulative: <= 1 KiB: 1 and 1024; <= 4 KiB: + 1025, 4096; <= 512 KiB: none more; <= 1 MiB:
    # + 600 KiB; <= 2 MiB: + 1 MiB + 1; <= 4 MiB: + 3 MiB
    bounds = ("1024.0", "4096.0", "524288.0", "1.048576e+06", "2.097152e+06", "4.194304e+06")  # as exported
    assert [bucket(le) for le in bounds] == [2, 4, 4, 5, 6, 7]
    assert bucket("+Inf") == 7
    assert sample(metrics, "rocketmq_message_size_sum", topic="SizeTopic", message_type="NORMAL") == sum(sizes)
    assert bucket("1024.0", "SizeFifo", "FIFO") == 0 and bucket("4096.0", "SizeFifo", "FIFO") == 1


def test_commits_and_rollbacks_count_by_real_topic(v2m, metrics, create_topics):
    create_topics("TxMetric", message_type="TRANSACTION")
    for tid in ("TXC1", "TXC2", "TXR1"):
        send_ok(v2m, message("TxMetric", message_id=tid, message_type=d.TRANSACTION))
    assert end(v2m, "TxMetric", "TXC1", d.COMMIT).status.code == d.OK
    assert end(v2m, "TxMetric", "TXC2", d.COMMIT).status.code == d.OK
    assert end(v2m, "TxMetric", "TXR1", d.ROLLBACK).status.code == d.OK
    assert end(v2m, "TxMetric", "TXC1", d.COMMIT, d.SOURCE_SERVER_CHECK).status.code == d.OK  # repeated: once
    assert end(v2m, "TxMetric", "UNKNOWN", d.COMMIT).status.code == d.INVALID_TRANSACTION_ID  # not counted
    assert sample(metrics, "rocketmq_commit_messages_total", topic="TxMetric") == 2
    assert sample(metrics, "rocketmq_rollback_messages_total", topic="TxMetric") == 1


def test_half_messages_are_the_open_transactions_by_real_topic(v2m, metrics, create_topics):
    create_topics("TxHalf", message_type="TRANSACTION")

    def half_messages() -> float | None:
        return metrics.registry.get_sample_value("rocketmq_half_messages", {"topic": "TxHalf"})

    def settles_at(expected: float) -> None:  # the store counts as it dispatches: asynchronously
        wait_until(lambda: half_messages() == expected)

    assert half_messages() is None  # no transaction on the topic yet
    send_ok(v2m, message("TxHalf", message_id="TXH1", message_type=d.TRANSACTION))
    send_ok(v2m, message("TxHalf", message_id="TXH2", message_type=d.TRANSACTION))
    settles_at(2)
    assert end(v2m, "TxHalf", "TXH1", d.COMMIT).status.code == d.OK
    settles_at(1)
    assert end(v2m, "TxHalf", "TXH1", d.COMMIT, d.SOURCE_SERVER_CHECK).status.code == d.OK  # repeated
    assert end(v2m, "TxHalf", "TXH2", d.ROLLBACK).status.code == d.OK
    settles_at(0)
    assert b'rocketmq_half_messages{topic="TxHalf"} 0.0' in generate_latest(metrics.registry)


def test_ready_messages_are_the_backlog_and_dlq_moves_count(v2m, metrics, create_topics):
    create_topics("ReadyTopic")
    send_ok(v2m, *(message("ReadyTopic", body=b"x", message_id=f"READY{i}") for i in range(6)))
    got: list = []
    while len(got) < 2:
        got += receive(v2m, "ReadyTopic", group="ReadyGroup", batch_size=2 - len(got))[1]
    labels = dict(consumer_group="ReadyGroup", topic="ReadyTopic")
    assert sample(metrics, "rocketmq_consumer_ready_messages", **labels) == 4  # 6 sent, 2 handed out
    assert sample(metrics, "rocketmq_consumer_inflight_messages", **labels) == 2
    response = v2m.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="ReadyGroup"),
            topic=d.Resource(name="ReadyTopic"),
            receipt_handle=got[0].system_properties.receipt_handle,
            message_id=got[0].system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=16,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert response.status.code == d.OK
    assert sample(metrics, "rocketmq_send_to_dlq_messages_total", **labels) == 1
    assert sample(metrics, "rocketmq_consumer_lag_messages", **labels) == 5
    assert sample(metrics, "rocketmq_consumer_ready_messages", **labels) == 4
