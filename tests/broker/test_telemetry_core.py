"""Settings decisions, client sessions and routes: the core on the in-process store (no servers)."""

from __future__ import annotations

import pytest

from services.broker.assembly import build_broker_group_core
from services.broker.broker_group_router import RouteService
from services.broker.broker_groups import BrokerGroups
from services.broker.config import BrokerConfig, address_scheme
from services.broker.errors import BrokerError, Code
from services.broker.model import ClientType
from services.broker.route import queue_permission
from services.broker.telemetry import ClientRegistry, ClientSettings, RetryPolicySettings, TelemetryService
from services.broker.topics import TopicRegistry
from services.domain.delivery import MessageType
from services.domain.retry_policy import EXPONENTIAL, CustomizedRetryPolicy, ExponentialRetryPolicy, GroupRetryPolicy
from services.domain.routes import QueueData
from services.store.client.model import TopicInfo


def service(store_client) -> TelemetryService:
    return TelemetryService(BrokerConfig(), store_client, ClientRegistry(), store_client.clock)


def test_producer_settings(store_client):
    server = service(store_client).settings_for(ClientSettings(ClientType.PRODUCER, publishing_topics=("T",)))
    assert server.max_body_size == 4 * 1024 * 1024 and server.validate_message_type is True
    assert server.backoff.max_attempts == 3 and server.backoff.exponential == (10, 1000, 2.0)
    assert server.backoff.customized_ms is None and server.fifo is None


def test_consumer_settings_follow_the_group(store_client):
    store_client.update_group("G", fifo=True, retry_max_times=5)
    telemetry = service(store_client)
    server = telemetry.settings_for(ClientSettings(ClientType.PUSH_CONSUMER, subscription_group="G"))
    assert server.fifo is True and server.receive_batch_size == 32 and server.long_polling_timeout_ms == 20_000
    assert server.backoff.max_attempts == 6 and server.backoff.customized_ms[:3] == (1000, 5000, 10000)
    unknown = telemetry.settings_for(ClientSettings(ClientType.SIMPLE_CONSUMER, subscription_group="nope"))
    assert unknown.fifo is False and unknown.backoff.max_attempts == 17 and len(unknown.backoff.customized_ms) == 18


def test_consumer_settings_carry_the_groups_retry_policy(store_client):
    telemetry = TelemetryService(
        BrokerConfig(consumer_retry_delays_ms=(2_000, 4_000)), store_client, ClientRegistry(), store_client.clock
    )

    def backoff(group: str):
        return telemetry.settings_for(ClientSettings(ClientType.PUSH_CONSUMER, subscription_group=group)).backoff

    store_client.update_group("Default", fifo=False, retry_max_times=2)
    assert backoff("Default") == RetryPolicySettings(max_attempts=3, customized_ms=(2_000, 4_000))  # the broker's
    store_client.update_group(
        "Custom", fifo=False, retry_max_times=4, retry_policy=GroupRetryPolicy.of(CustomizedRetryPolicy((1_000, 3_000)))
    )
    assert backoff("Custom") == RetryPolicySettings(max_attempts=5, customized_ms=(1_000, 3_000))
    store_client.update_group(
        "Exp", fifo=False, retry_max_times=16, retry_policy=GroupRetryPolicy.of(ExponentialRetryPolicy(500, 8_000, 3))
    )
    assert backoff("Exp") == RetryPolicySettings(max_attempts=17, exponential=(500, 8_000, 3.0))
    # EXPONENTIAL without parameters: RocketMQ's ExponentialRetryPolicy defaults, as the proxy sends.
    store_client.update_group("ExpBare", fifo=False, retry_max_times=16, retry_policy=GroupRetryPolicy(EXPONENTIAL))
    assert backoff("ExpBare").exponential == (5_000, 7_200_000, 2.0)


def test_settings_without_publishing_or_subscription_are_a_bad_request(store_client):
    with pytest.raises(BrokerError) as caught:
        service(store_client).settings_for(ClientSettings(ClientType.PRODUCER))
    assert caught.value.code == Code.BAD_REQUEST


def test_registry_tracks_producers_and_replaces_streams(store_client):
    telemetry = service(store_client)
    pushed: list[object] = []
    first = telemetry.open_session("c1", lambda cmd: pushed.append(cmd) or True)
    telemetry.apply_settings(first, ClientSettings(ClientType.PRODUCER, publishing_topics=("A", "B")))
    other = telemetry.open_session("c2", lambda cmd: True)
    telemetry.apply_settings(other, ClientSettings(ClientType.SIMPLE_CONSUMER, subscription_group="G"))
    assert [s.client_id for s in telemetry.registry.producers_of("A")] == ["c1"]
    assert telemetry.registry.producers_of("C") == []
    telemetry.registry.producers_of("B")[0].push("command")
    assert pushed == ["command"]
    # The client reconnects: the new stream replaces the old; the old one ending changes nothing.
    second = telemetry.open_session("c1", lambda cmd: True)
    telemetry.apply_settings(second, ClientSettings(ClientType.PRODUCER, publishing_topics=("A",)))
    telemetry.close_session(first)
    assert telemetry.registry.get("c1") is second and len(telemetry.registry) == 2
    telemetry.close_session(second)
    assert telemetry.registry.get("c1") is None


def test_heartbeat_refreshes_liveness(store_client, clock):
    telemetry = service(store_client)
    session = telemetry.open_session("c1", lambda cmd: True)
    opened_ms = clock.now_ms()
    telemetry.apply_settings(session, ClientSettings(ClientType.PRODUCER, publishing_topics=()))
    clock.advance_ms(5000)
    telemetry.heartbeat("c1")
    telemetry.heartbeat("unknown")  # no session: nothing to do, no error
    assert session.last_seen_ms == opened_ms + 5000


def routes(store_client, **config) -> RouteService:
    """QueryRoute of a broker with one group (no routes in etcd): the home group's topics."""
    cfg = BrokerConfig(**{"put_coalescing_enable": False, **config})
    core = build_broker_group_core(
        cfg, "broker-a", store_client, ("127.0.0.1", 8081), ClientRegistry(), store_client.clock
    )
    return RouteService(BrokerGroups(core, lambda name: core), ("127.0.0.1", 8081))


def test_route_of_an_auto_created_topic(store_client):
    route = routes(store_client, auto_create_topic_enable=True).query_route("TopicTest")
    assert (route.broker_name, route.broker_id) == ("broker-a", 0)
    assert (route.endpoint_scheme, route.endpoint_host, route.endpoint_port) == ("IPv4", "127.0.0.1", 8081)
    assert [q.queue_id for q in route.queues] == list(range(8))
    assert {q.permission for q in route.queues} == {"READ_WRITE"}
    assert route.accept_message_types == (
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
    )


@pytest.mark.parametrize(
    "topic_type,accepted",
    [
        ("NORMAL", (MessageType.NORMAL,)),
        ("FIFO", (MessageType.FIFO,)),
        ("DELAY", (MessageType.DELAY,)),
        ("TRANSACTION", (MessageType.TRANSACTION,)),
    ],
)
def test_route_accept_types_follow_the_topic(store_client, topic_type, accepted):
    store_client.create_topic(TopicInfo("T", 4, 4, 6, topic_type))
    assert routes(store_client).query_route("T").accept_message_types == accepted


def test_queue_permissions():
    uneven = QueueData("broker-a", read_queue_nums=4, write_queue_nums=2, perm=6)
    assert [queue_permission(i, uneven) for i in range(4)] == ["READ_WRITE", "READ_WRITE", "READ", "READ"]
    write_only = QueueData("broker-a", 2, 3, perm=2)
    assert [queue_permission(i, write_only) for i in range(3)] == ["WRITE"] * 3
    closed = QueueData("broker-a", 2, 2, perm=0)
    assert queue_permission(0, closed) == "NONE"
    assert queue_permission(0, uneven, up=False) == "NONE"  # a group that is down keeps its place, unusable


def test_route_errors(store_client):
    with pytest.raises(BrokerError) as caught:
        routes(store_client).query_route("SCHEDULE_TOPIC_XXXX")
    assert caught.value.code == Code.ILLEGAL_TOPIC
    with pytest.raises(BrokerError) as caught:
        routes(store_client).query_route("Missing")  # auto-create is off by default, as in RocketMQ 5's proxy
    assert caught.value.code == Code.TOPIC_NOT_FOUND == 40402
    assert caught.value.message == (
        "CODE: 17  DESC: No topic route info in name server for the topic: Missing, "
        "create it first (pyrmq topic create Missing --type NORMAL)"
    )
    assert store_client.get_topic("Missing") is None


def test_topic_cache_expires(store_client, clock):
    registry = TopicRegistry(BrokerConfig(), store_client, clock)
    with pytest.raises(BrokerError):
        registry.get("T")
    store_client.create_topic(TopicInfo("T", 8, 8, 6, "FIFO"))
    with pytest.raises(BrokerError):
        registry.get("T")  # "absent" is remembered for topic_cache_miss_ttl_ms
    clock.advance_ms(1000)
    assert registry.get("T").message_type == "FIFO"
    store_client.create_topic(TopicInfo("T", 8, 8, 6, "NORMAL"))
    assert registry.get("T").message_type == "FIFO"
    clock.advance_ms(3000)
    assert registry.get("T").message_type == "NORMAL"


def test_address_schemes():
    assert [address_scheme(h) for h in ("127.0.0.1", "::1", "broker.local")] == ["IPv4", "IPv6", "DOMAIN_NAME"]


def test_advertised_endpoint():
    assert BrokerConfig(host="0.0.0.0").advertised_endpoint(9000) == ("127.0.0.1", 9000)
    assert BrokerConfig(advertised_host="mq.example", advertised_port=443).advertised_endpoint(9000) == (
        "mq.example",
        443,
    )


def test_config_checks():
    with pytest.raises(ValueError):
        BrokerConfig(store_address="nohost")
    with pytest.raises(ValueError):
        BrokerConfig(auto_create_topic_message_type="ROCKET")
    with pytest.raises(ValueError):
        BrokerConfig(grpc_workers_max=10, telemetry_streams_max=8)
