"""Broker metrics over real servers: RPC latency by method and in-band code, traffic by topic."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from prometheus_client import generate_latest

from services.broker.metrics import BrokerMetrics
from tests.support.v2_requests import ack, message, receive, send, send_ok

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def v2m(make_broker, metrics: BrokerMetrics) -> Iterator[s_grpc.MessagingServiceStub]:
    broker = make_broker(metrics=metrics)
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
