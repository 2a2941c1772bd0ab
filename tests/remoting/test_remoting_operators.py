"""Remoting clients as operators see them: ``ClientAdmin.list_clients`` and the admin RPC
ListClients (``protocol`` remoting, RocketMQ's version names), ``pyrmq client list`` and
``pyrmq status``, and the connection gauges' ``protocol_type="remoting"`` series; against a real
broker and remoting door in this process, with clients heartbeating through it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.admin import status
from services.broker.classic_clients import ClassicClients, ConsumerClient, ProducerClient, Subscription
from services.broker.client_admin import REMOTING, mq_version_name
from services.broker.metrics import BrokerMetrics, ConnectionsCollector
from services.broker.remoting.door import RemotingDoor, build_remoting
from services.broker.v2.server import BrokerServer
from services.domain.remoting.codes import RequestCode
from services.runtime.clock import ManualClock
from tests.support.cli import run_pyrmq
from tests.support.remoting_client import RemotingTestClient
from tests.support.waits import wait_until

CONSUMER_ID, PRODUCER_ID = "10.0.0.1@ops-consumer", "10.0.0.2@ops-producer"


@pytest.fixture
def metered(make_broker: Callable[..., BrokerServer]) -> Iterator[tuple[BrokerServer, BrokerMetrics, RemotingDoor]]:
    """A broker with its metrics registry, and the remoting door over its core."""
    metrics = BrokerMetrics()
    broker = make_broker(metrics=metrics)
    door = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False)
    door.start()
    try:
        yield broker, metrics, door
    finally:
        door.stop()


def heartbeat(client: RemotingTestClient, body: dict) -> None:
    response = client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
    assert response.code == 0, response.remark


def connect_clients(door: RemotingDoor) -> tuple[RemotingTestClient, RemotingTestClient]:
    """A broadcasting push consumer (C++, V4_9_4) and a producer (Java, V5_3_3) that also joins
    CLIENT_INNER_PRODUCER, as every Java client does."""
    consumer = RemotingTestClient(door.context.address, language="CPP", version=401)
    heartbeat(
        consumer,
        {
            "clientID": CONSUMER_ID,
            "consumerDataSet": [
                {
                    "groupName": "OpsGroup",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "BROADCASTING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": "OpsTopicB", "subString": "*"},
                        {"topic": "OpsTopicA", "subString": "TagA || TagB"},
                    ],
                }
            ],
        },
    )
    producer = RemotingTestClient(door.context.address, language="JAVA", version=479)
    heartbeat(
        producer,
        {
            "clientID": PRODUCER_ID,
            "producerDataSet": [{"groupName": "OpsProducers"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
        },
    )
    return consumer, producer


def test_list_clients_names_remoting_clients_with_their_headers(metered) -> None:
    broker, _, door = metered
    consumer, producer = connect_clients(door)
    with consumer, producer:
        views = {(v.client_id, v.group): v for v in broker.core.clients.list_clients()}
        assert set(views) == {
            (CONSUMER_ID, "OpsGroup"),
            (PRODUCER_ID, "OpsProducers"),
            (PRODUCER_ID, "CLIENT_INNER_PRODUCER"),
        }
        pushed = views[CONSUMER_ID, "OpsGroup"]
        assert (pushed.protocol, pushed.client_type, pushed.message_model) == (
            REMOTING,
            "PUSH_CONSUMER",
            "BROADCASTING",
        )
        assert (pushed.language, pushed.version) == ("CPP", "V4_9_4")
        assert pushed.topics == ("OpsTopicA", "OpsTopicB") and pushed.expressions == ("TagA || TagB", "*")
        assert pushed.address.startswith("127.0.0.1:") and pushed.last_heartbeat_ms > 0
        sending = views[PRODUCER_ID, "OpsProducers"]
        assert (sending.protocol, sending.client_type, sending.language, sending.version) == (
            REMOTING,
            "PRODUCER",
            "JAVA",
            "V5_3_3",
        )
        assert [v.client_id for v in broker.core.clients.list_clients("OpsGroup")] == [CONSUMER_ID]

        with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:  # the admin RPC
            listed = pb_grpc.AdminStub(channel).ListClients(pb.ListClientsRequest(group="OpsGroup"), timeout=10)
        [client] = listed.clients
        assert (client.protocol, client.message_model, client.version) == ("remoting", "BROADCASTING", "V4_9_4")

        code, out, err = run_pyrmq("client", "list", "--endpoint", f"127.0.0.1:{broker.port}", "--json")
        assert code == 0, err
        rows = {(c["client_id"], c["group"]): c for c in json.loads(out)["clients"]}
        assert rows[CONSUMER_ID, "OpsGroup"]["protocol"] == "remoting"
        assert rows[PRODUCER_ID, "OpsProducers"]["version"] == "V5_3_3"
        code, out, err = run_pyrmq("client", "list", "--endpoint", f"127.0.0.1:{broker.port}")
        assert code == 0, err
        assert "remoting" in out and "PUSH_CONSUMER (broadcasting)" in out and "V4_9_4" in out

    # Each connection closed: its clients leave the list.
    wait_until(lambda: not broker.core.clients.list_clients(), 10, what="remoting clients gone")


def test_status_counts_clients_by_protocol(metered) -> None:
    broker, _, door = metered
    consumer, producer = connect_clients(door)
    with consumer, producer, grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        stub = pb_grpc.AdminStub(channel)
        rows = status.connected_clients(stub, 10, include_system=False)
        assert rows == [
            {
                "protocol": "remoting",
                "client_type": "PRODUCER",
                "group": "OpsProducers",
                "count": 1,
                "versions": ["JAVA V5_3_3"],
            },
            {
                "protocol": "remoting",
                "client_type": "PUSH_CONSUMER",
                "group": "OpsGroup",
                "count": 1,
                "versions": ["CPP V4_9_4"],
            },
        ]
        everything = status.connected_clients(stub, 10, include_system=True)
        assert everything is not None and {row["group"] for row in everything} == {
            "OpsProducers",
            "OpsGroup",
            "CLIENT_INNER_PRODUCER",
        }
        # The whole command: the clients table (the helpers are not running here: exit 4).
        code, out, _ = run_pyrmq("status", "--endpoint", f"127.0.0.1:{broker.port}", "--metrics-port", "-1")
        assert code == 4
        assert "Clients of this broker" in out and "CPP V4_9_4" in out


def test_connection_gauges_count_remoting_clients(metered) -> None:
    _, metrics, door = metered
    consumer, producer = connect_clients(door)
    with consumer, producer:
        text = generate_latest(metrics.registry).decode()
    assert 'rocketmq_producer_connections{language="java",protocol_type="remoting",version="v5_3_3"} 2.0' in text
    assert (
        'rocketmq_consumer_connections{consume_mode="push",consumer_group="OpsGroup",is_system="false",'
        'language="cpp",protocol_type="remoting",version="v4_9_4"} 1.0'
    ) in text


class Channel:
    closed = False

    def members_changed(self, group: str) -> None:
        pass

    def check_transaction(self, check: object) -> bool:
        return False


def test_consume_modes_and_types_of_remoting_consumers() -> None:
    """ConsumeType -> consume_mode (RocketMQ's getTypeCN, lower-cased) and the listed client type."""
    clients = ClassicClients(ManualClock())
    for group, consume_type in (("Pull", "CONSUME_ACTIVELY"), ("Push", "CONSUME_PASSIVELY"), ("Pop", "CONSUME_POP")):
        subscriptions = {"T": Subscription("T")}
        clients.consumer_heartbeat(
            ConsumerClient(f"c-{group}", group, Channel(), subscriptions, consume_type=consume_type, language="GO")
        )
    clients.producer_heartbeat(ProducerClient("p", "P", Channel(), language="", version=99_999))
    registry = CollectorRegistry()
    registry.register(ConnectionsCollector(list, clients))
    registry_text = generate_latest(registry).decode()
    for group, mode in (("Pull", "pull"), ("Push", "push"), ("Pop", "pop")):
        assert (
            f'rocketmq_consumer_connections{{consume_mode="{mode}",consumer_group="{group}",is_system="false",'
            f'language="go",protocol_type="remoting",version="v3_0_0_snapshot"}} 1.0'
        ) in registry_text
    assert 'language="unknown",protocol_type="remoting",version="higher_version"} 1.0' in registry_text


@pytest.mark.parametrize(
    ("ordinal", "name"),
    [(0, "V3_0_0_SNAPSHOT"), (15, "V3_0_0_FINAL"), (63, "V3_1_8"), (213, "V4_0_0"), (317, "V4_5_2"), (333, "V4_6_0")]
    + [(399, "V4_9_3"), (401, "V4_9_4"), (413, "V5_0_0"), (475, "V5_3_1"), (479, "V5_3_3"), (611, "V5_9_9")]
    + [(612, "HIGHER_VERSION"), (10_000, "HIGHER_VERSION"), (-1, "-1")],
)
def test_version_names_are_rocketmqs(ordinal: int, name: str) -> None:
    """RocketMQ's MQVersion.Version ordinals (the ones the remoting protocol code names too, and
    the ends of the enum: past its last constant, getVersionDesc says HIGHER_VERSION)."""
    assert mq_version_name(ordinal) == name
