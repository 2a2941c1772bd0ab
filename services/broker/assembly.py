"""The broker's construction point: every core object of a broker process, built in dependency
order, each given what it needs in its constructor. No gRPC here: ``v2/server.py`` binds the
ports first (the advertised endpoint names the bound port) and serves the core built here.

The order:

1. the lite subscriptions and the client registry, shared by every broker group;
2. the home group's ``BrokerGroupCore`` (``build_broker_group_core``: topics, send queue, producer,
   transactions, consumer, offsets, arrival hub, renewer) and ``BrokerGroups``, which makes another
   group's core the first time a route names it;
3. the Telemetry sessions (a client's termination releases its lite subscriptions and renewals)
   and the access guard;
4. the services over broker groups: routes, sends, transaction ends, receives (lite ones too)
   and offsets;
5. topic placement over the groups, through which auto-create places a topic with etcd, and
   the admin services (topics, groups, status, users and ACLs, clients, transaction checks);
6. the metrics' readers of the core's figures.

Three references run backwards and are closures over a name bound later in ``build_core``: the
lite subscriptions ask ``BrokerGroups`` for a parent topic's broker groups and, when a group's
arrival stream restarts, the lite consumer for its wildcard clients' backlog; ``BrokerGroups``
auto-creates a topic through the placement, which attaches broker groups. Nothing is started
here (a group's send queue dispatcher runs from construction).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from services.broker.access import AccessGuard, auth_snapshot
from services.broker.acl_admin import AclAdmin
from services.broker.admin import AdminService
from services.broker.broker_group_consumer import RoutedConsumer, RoutedOffsets
from services.broker.broker_group_core import BrokerGroupCore, arrival_watch
from services.broker.broker_group_router import RoutedProducer, RoutedTransactions, RouteService
from services.broker.broker_group_stats import consumer_stats, renewal_stats, send_queue_stats
from services.broker.broker_groups import BrokerGroups, ClusterView
from services.broker.classic_clients import ClassicClients
from services.broker.classic_offsets import ClassicOffsets
from services.broker.classic_producer import ClassicProducer
from services.broker.client_admin import ClientAdmin, ClientCommands
from services.broker.cluster_admin import ClusterAdmin
from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub, ConsumerLimits, ConsumerService
from services.broker.errors import BrokerError
from services.broker.lite_consumer import LiteConsumer
from services.broker.lite_subscriptions import LiteSubscriptions
from services.broker.metrics import BrokerMetrics
from services.broker.producer import Producer
from services.broker.pull import OffsetService
from services.broker.put_coalescer import BrokerStore, DirectPutSink, PutCoalescer, PutSink
from services.broker.renewal import ReceiptHandleTable, ReceiptRenewer
from services.broker.telemetry import ClientRegistry, TelemetryService
from services.broker.topic_placement import TopicPlacement
from services.broker.topics import TopicRegistry
from services.broker.transaction import (
    HalfMessageTable,
    HalfRef,
    TransactionCheck,
    TransactionCheckRelay,
    TransactionService,
)
from services.domain.routes import TopicRoute
from services.runtime.clock import Clock, SystemClock
from services.store.client.client import StoreClient
from services.store.client.model import PutOutcome

log = logging.getLogger(__name__)


class WireCommands(ClientCommands, Protocol):
    """The server commands a client's Telemetry stream carries, built by the protocol's shell
    (``v2/admin_servicer.py``: ``V2ClientCommands``)."""

    def unsubscribe_lite_command(self, lite_topic: str) -> Any: ...
    def check_command(self, check: TransactionCheck) -> Any: ...


@dataclass(frozen=True)
class BrokerCore:
    """Every core object a broker's shell serves."""

    config: BrokerConfig
    clock: Clock
    store: StoreClient  # the home group's (users, ACLs and the admin calls of one group)
    broker_groups: BrokerGroups  # one BrokerGroupCore per broker group (broker_groups.py)
    lite: LiteSubscriptions
    telemetry: TelemetryService
    guard: AccessGuard | None  # None: authentication is off
    routes: RouteService
    producer: RoutedProducer
    transactions: RoutedTransactions
    consumer: RoutedConsumer
    offsets: RoutedOffsets
    placement: TopicPlacement
    admin: AdminService  # the home group's store
    cluster_admin: ClusterAdmin  # status, progress, reset and message queries over every group
    acl: AclAdmin
    clients: ClientAdmin
    checks: TransactionCheckRelay
    classic_clients: ClassicClients  # the remoting door's clients (heartbeats, queue locks)
    classic_offsets: ClassicOffsets  # commit offsets classic pulls carry, written to the stores in rounds


def build_core(
    config: BrokerConfig,
    store: StoreClient,
    endpoint: tuple[str, int],
    commands: WireCommands,
    clock: Clock | None = None,
    metrics: BrokerMetrics | None = None,
    cluster: ClusterView | None = None,
) -> BrokerCore:
    """``store``: the home group's client (``broker_name``); ``endpoint``: what routes advertise;
    ``cluster``: the topic routes over broker groups and a client for any group (broker_groups.py;
    None: every topic is the home group's)."""
    clock = clock or SystemClock()
    registry = ClientRegistry()
    classic_clients = ClassicClients(clock)
    lite = LiteSubscriptions(
        clock,
        lambda topic: broker_groups.route(topic).groups,
        config.lite_subscription_quota,
        config.lite_subscription_expire_ms,
        lambda broker_group, clients: lite_consumer.wildcard_restart(broker_group, clients),
    )

    def make_core(name: str, group_store: StoreClient) -> BrokerGroupCore:
        return build_broker_group_core(config, name, group_store, endpoint, registry, clock, metrics, lite)

    def make_other(name: str) -> BrokerGroupCore:
        if cluster is None:
            raise BrokerError(f"broker group {name} is in a route, but this broker has no etcd to find it")
        return make_core(name, cluster.connect(name))

    route_store = cluster.route_store if cluster is not None else None

    def place(name: str) -> TopicRoute:
        return placement.place_route(name, config.auto_create_topic_message_type, config.auto_create_topic_queue_nums)

    broker_groups = BrokerGroups(
        make_core(config.broker_name, store),
        make_other,
        cluster.routes if cluster is not None else None,
        place=place if route_store is not None else None,
    )

    def client_terminated(client_id: str) -> None:
        lite.drop_client(client_id)
        for core in broker_groups.cores():
            if core.renewer is not None:
                core.renewer.client_terminated(client_id)

    telemetry = TelemetryService(config, store, registry, clock, on_terminate=client_terminated)
    guard = access_guard(config, store, clock)
    lite_consumer = LiteConsumer(
        broker_groups,
        lite,
        clock,
        consumer_limits(config),
        notify_unsubscribe(registry, commands.unsubscribe_lite_command),
    )
    placement = TopicPlacement(
        broker_groups, route_store, cluster.registered_broker_groups if cluster is not None else list
    )
    admin = AdminService(store, broker_groups.home.topics.invalidate, lambda: store.address)
    core = BrokerCore(
        config=config,
        clock=clock,
        store=store,
        broker_groups=broker_groups,
        lite=lite,
        telemetry=telemetry,
        guard=guard,
        routes=RouteService(broker_groups, endpoint),
        producer=RoutedProducer(broker_groups, clock),
        transactions=RoutedTransactions(broker_groups),
        consumer=RoutedConsumer(broker_groups, lite_consumer),
        offsets=RoutedOffsets(broker_groups),
        placement=placement,
        admin=admin,
        cluster_admin=ClusterAdmin(placement.cluster_broker_groups, placement.admin, placement.home_broker_group),
        acl=AclAdmin(store, guard.invalidate if guard is not None else lambda: None),
        clients=ClientAdmin(registry, telemetry.answers, admin, commands, classic_clients),
        checks=TransactionCheckRelay(registry, broker_groups.home.halves, commands.check_command, classic_clients),
        classic_clients=classic_clients,
        classic_offsets=ClassicOffsets(lambda name: broker_groups.core(name).store),
    )
    if metrics is not None:
        # Every group's send queue, renewer and consumer figures, summed (broker_group_stats.py).
        metrics.watch(send_queue_stats(broker_groups), lambda: len(registry), consumer_stats(broker_groups))
        metrics.watch_connections(registry.sessions, classic_clients)
        metrics.watch_lite(lite.counts)
        if broker_groups.home.renewer is not None:
            metrics.watch_renewals(renewal_stats(broker_groups))
    return core


def build_broker_group_core(
    config: BrokerConfig,
    name: str,
    store: StoreClient,
    endpoint: tuple[str, int],
    registry: ClientRegistry,
    clock: Clock,
    metrics: BrokerMetrics | None = None,
    lite: LiteSubscriptions | None = None,
) -> BrokerGroupCore:
    """One broker group's core (broker_group_core.py), its objects built with ``broker_name`` = the
    group's name; starts nothing."""
    config = replace(config, broker_name=name) if config.broker_name != name else config
    topics = TopicRegistry(config, store, clock)
    sink = build_sink(config, store, clock)
    renewer = (
        ReceiptRenewer(store, ReceiptHandleTable(config.renew_handles_max), registry, config, clock)
        if config.auto_renew_enable
        else None
    )
    halves = HalfMessageTable()
    hub = ArrivalHub()
    watch_start, watch_stop = arrival_watch(store, hub, name, lite)

    def on_half_stored(transaction_id: str, topic: str, outcome: PutOutcome) -> None:
        halves.remember(transaction_id, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))

    return BrokerGroupCore(
        name=name,
        store=store,
        config=config,
        topics=topics,
        sink=sink,
        producer=Producer(config, topics, sink, clock, on_half_stored),
        classic_producer=ClassicProducer(config, topics, sink, clock, on_half_stored),
        transactions=TransactionService(
            store, sink, halves, clock, observer=metrics.transactions if metrics is not None else None
        ),
        halves=halves,
        consumer=ConsumerService(store, topics, hub, clock, name, endpoint, consumer_limits(config), renewer),
        offsets=OffsetService(store, topics, hub, clock, name),
        hub=hub,
        renewer=renewer,
        watch_start=watch_start,
        watch_stop=watch_stop,
    )


def build_sink(config: BrokerConfig, store: BrokerStore, clock: Clock | None = None) -> PutSink:
    """The send queue: a ``PutCoalescer`` (its dispatcher started), or one put per send."""
    if not config.put_coalescing_enable:
        return DirectPutSink(store.put_messages)
    coalescer = PutCoalescer(
        store.put_messages,
        batch_messages_max=config.put_batch_messages_max,
        batch_bytes_max=config.put_batch_bytes_max,
        queue_messages_max=config.put_queue_messages_max,
        queue_bytes_max=config.put_queue_bytes_max,
        queue_wait_max_ms=config.put_queue_wait_max_ms,
        monotonic_s=(clock or SystemClock()).monotonic_s,
        store_failing_over=lambda: store.failing_over,
        store_failovers=lambda: store.failovers,
    )
    coalescer.start()
    return coalescer


def consumer_limits(config: BrokerConfig) -> ConsumerLimits:
    return ConsumerLimits(
        invisible_ms_min=config.invisible_duration_ms_min,
        invisible_ms_max=config.invisible_duration_ms_max,
        polling_ms_min=config.long_polling_timeout_ms_min,
        polling_ms_max=config.long_polling_timeout_ms_max,
        batch_max=config.consumer_receive_batch_size,
        auto_renew_invisible_ms=config.auto_renew_invisible_ms,
    )


def access_guard(config: BrokerConfig, store: StoreClient, clock: Clock) -> AccessGuard | None:
    """The AccessGuard when authentication is on (None: every request passes, as upstream's
    default), after creating ``init_authentication_user`` if the store has no users yet."""
    if not config.authentication_enabled:
        return None
    if config.init_authentication_user:
        name, _, secret = config.init_authentication_user.partition(":")
        users, _, _ = store.auth_config()
        if not users:
            store.put_user(name, secret, "Super", "enable")
            log.info("created the initial Super user %r (init_authentication_user)", name)
    log.info("authentication on%s", ", authorization on" if config.authorization_enabled else "")
    return AccessGuard(
        lambda: auth_snapshot(store),
        clock,
        authorization=config.authorization_enabled,
        cache_ttl_ms=config.auth_cache_ttl_ms,
        max_clock_skew_s=config.auth_max_clock_skew_s,
        local_time_tolerant=config.auth_local_time_tolerant,
    )


def notify_unsubscribe(registry: ClientRegistry, command: Callable[[str], Any]) -> Callable[[str, str], bool]:
    """Write NotifyUnsubscribeLiteCommand on a client's Telemetry stream (an exclusive lite group's
    lite topic was taken over by another client); False if the client has no stream here."""

    def notify(client_id: str, lite_topic: str) -> bool:
        session = registry.get(client_id)
        return session is not None and session.push(command(lite_topic))

    return notify
