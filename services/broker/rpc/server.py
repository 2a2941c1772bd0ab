"""Build the broker's gRPC server: MessagingService, Pull (raw-record pulls), Admin, grpc health
and server reflection.

``build_server`` wires the core (topics, put sink, producer, routes, telemetry) to one
``StoreClient`` (each part sees it through its own narrow protocol) and returns a ``BrokerServer``: the grpc server *not started*, the port it
bound (pass port 0 for a free one) and the endpoint it advertises in routes. ``stop`` reports
NOT_SERVING, ends the Telemetry streams (which never end by themselves), stops the server
with a grace period, then drains the send queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.broker.access import AccessGuard, auth_snapshot
from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub, ConsumerLimits, ConsumerService
from services.broker.front import FrontPlan, FrontWatchdog, HaproxyFront, listen_socket
from services.broker.metrics import BrokerMetrics
from services.broker.producer import Producer
from services.broker.pull import OffsetService
from services.broker.put_coalescer import BrokerStore, DirectPutSink, PutCoalescer, PutSink
from services.broker.raw_pull import RawPullService
from services.broker.renewal import ReceiptHandleTable, ReceiptRenewer
from services.broker.route import RouteService
from services.broker.rpc.admin_servicer import ADMIN_SERVICE_NAME, add_admin_service
from services.broker.rpc.pool import TimedThreadPool
from services.broker.rpc.pull_servicer import PULL_SERVICE_NAME, add_pull_service
from services.broker.rpc.servicer import MessagingServicer
from services.broker.rpc.status import DIRECT, Peers
from services.broker.rpc.telemetry_stream import TelemetryStreams
from services.broker.telemetry import ClientRegistry, TelemetryService
from services.broker.tls_cert import ServerCertificate, certificate_hosts, load_configured, load_or_create
from services.broker.topics import TopicRegistry
from services.broker.transaction import HalfMessageTable, HalfRef, TransactionCheckRelay, TransactionService
from services.runtime.clock import Clock, SystemClock
from services.runtime.process import format_address
from services.runtime.rpc.decode_guard import DecodeGuardInterceptor
from services.store.client.client import StoreClient
from services.store.client.model import PutOutcome

STOP_WAIT_EXTRA_S = 10.0
log = logging.getLogger(__name__)

TLS_MODE_TEXT = {
    "both": "TLS and plaintext through HAProxy",
    "tls": "TLS",
    "plaintext": "plaintext",
}
SERVICE_NAME = s.DESCRIPTOR.services_by_name["MessagingService"].full_name  # apache.rocketmq.v2.MessagingService


@dataclass
class BrokerServer:
    server: grpc.Server
    port: int  # bound port
    endpoint: tuple[str, int]  # advertised in routes
    servicer: MessagingServicer
    sink: PutSink
    topics: TopicRegistry
    telemetry: TelemetryService
    health: health.HealthServicer
    hub: ArrivalHub = field(default_factory=ArrivalHub)
    watch_start: Callable[[], None] = lambda: None
    watch_stop: Callable[[], None] = lambda: None
    client_port: ClientPort | None = None
    _watchdog: FrontWatchdog | None = field(default=None, init=False)
    renewer: ReceiptRenewer | None = None  # None: auto_renew_enable is off

    def start(self) -> None:
        self.server.start()
        self.watch_start()
        front = self.client_port.front if self.client_port is not None else None
        if front is not None:
            front.start()
            self._watchdog = FrontWatchdog(front)
            self._watchdog.start()
        if self.renewer is not None:
            self.renewer.start()

    def stop(self, grace_s: float = 5.0) -> None:
        self.health.enter_graceful_shutdown()
        self.servicer.close()
        self.watch_stop()
        if self.renewer is not None:
            self.renewer.stop()
        # Bounded: a call that never finishes must not hang a SIGTERM shutdown (seen about once
        # in eight runs of the bad-input suite); gRPC cancels what is left after the grace.
        if not self.server.stop(grace_s).wait(grace_s + STOP_WAIT_EXTRA_S):
            log.warning("gRPC server not stopped %.0f s after the grace period; going on", STOP_WAIT_EXTRA_S)
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.client_port is not None and self.client_port.front is not None:
            self.client_port.front.stop()  # after gRPC's grace: in-flight calls finish through it
        self.sink.close()


def build_sink(config: BrokerConfig, store: BrokerStore, clock: Clock | None = None) -> PutSink:
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


def server_certificate(config: BrokerConfig, clock: Clock) -> ServerCertificate:
    """The configured certificate, else the self-signed one (services/broker/tls_cert.py);
    OSError if files cannot be read or written."""
    if config.tls_cert_path:
        return load_configured(config.tls_cert_path, config.tls_key_path)
    return load_or_create(config.data_dir, certificate_hosts(config.host, config.advertised_host), clock.now_ms())


@dataclass
class ClientPort:
    """The client port as bound: its port number, the certificate of its TLS connections, and
    the HAProxy front of ``tls_mode = both`` (not started)."""

    port: int
    certificate: ServerCertificate | None
    front: HaproxyFront | None = None

    @property
    def peers(self) -> Peers:
        return self.front.peers if self.front is not None else DIRECT


def bind_client_port(server: grpc.Server, config: BrokerConfig, clock: Clock) -> ClientPort:
    """Bind the client port as ``config.tls_mode`` says (OSError if it cannot): gRPC on the port
    itself (plaintext, tls), or on two loopback ports behind HAProxy (both)."""
    address = format_address(config.host, config.port)
    try:
        if config.tls_mode == "plaintext":
            return ClientPort(_bound(server.add_insecure_port(address), address), None)
        certificate = server_certificate(config, clock)
        credentials = grpc.ssl_server_credentials([(certificate.key_pem, certificate.cert_pem)])
        if config.tls_mode == "tls":
            return ClientPort(_bound(server.add_secure_port(address, credentials), address), certificate)
        plain = _bound(server.add_insecure_port("127.0.0.1:0"), "127.0.0.1:0")
        secure = _bound(server.add_secure_port("127.0.0.1:0", credentials), "127.0.0.1:0")
    except RuntimeError as exc:  # grpc's "Failed to bind"
        raise OSError(f"cannot bind the broker's gRPC port at {address} (in use?)") from exc
    try:
        listen = listen_socket(config.host, config.port)
    except OSError as exc:
        raise OSError(f"cannot bind the broker's client port at {address}: {exc}") from exc
    front = HaproxyFront(
        config.front_binary,
        listen,
        clock.monotonic_s,
        lambda fd, admin: FrontPlan(
            fd, plain, secure, admin, config.client_hello_timeout_ms, config.front_idle_timeout_ms
        ),
    )
    return ClientPort(listen.getsockname()[1], certificate, front)


def _bound(port: int, address: str) -> int:
    if port == 0:
        raise OSError(f"cannot bind the broker's gRPC port at {address} (in use?)")
    return port


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


def build_server(
    config: BrokerConfig, store: StoreClient, clock: Clock | None = None, metrics: BrokerMetrics | None = None
) -> BrokerServer:
    clock = clock or SystemClock()
    pool = TimedThreadPool(config.grpc_workers_max, "broker-rpc", clock.monotonic_s)
    server = grpc.server(
        pool,
        interceptors=[*([metrics.interceptor] if metrics else []), DecodeGuardInterceptor()],
        options=[
            ("grpc.max_receive_message_length", config.grpc_message_size_max_bytes),
            ("grpc.max_send_message_length", config.grpc_message_size_max_bytes),
            ("grpc.so_reuseport", 0),
            # Overload: without a cap, calls past what Python can take wait inside gRPC core
            # and are cancelled there after seconds; with it, excess calls are refused at
            # once (HTTP/2 REFUSED_STREAM: never processed, safe to retry).
            *(
                [("grpc.max_concurrent_streams", config.grpc_max_concurrent_streams)]
                if config.grpc_max_concurrent_streams
                else []
            ),
        ],
    )
    client_port = bind_client_port(server, config, clock)
    port = client_port.port
    endpoint = config.advertised_endpoint(port)
    topics = TopicRegistry(config, store, clock)
    sink = build_sink(config, store, clock)
    registry = ClientRegistry()
    renewer = (
        ReceiptRenewer(store, ReceiptHandleTable(config.renew_handles_max), registry, config, clock)
        if config.auto_renew_enable
        else None
    )
    telemetry = TelemetryService(
        config, store, registry, clock, on_terminate=renewer.client_terminated if renewer is not None else None
    )
    halves = HalfMessageTable()
    hub = ArrivalHub()
    watch_start, watch_stop = arrival_watch(store, hub)

    def on_half_stored(transaction_id: str, topic: str, outcome: PutOutcome) -> None:
        halves.remember(transaction_id, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))

    guard = access_guard(config, store, clock)
    offsets = OffsetService(store, topics, hub, clock, config.broker_name)
    servicer = MessagingServicer(
        RouteService(topics, config.broker_name, endpoint),
        Producer(config, topics, sink, clock, on_half_stored),
        TransactionService(store, sink, halves, clock, observer=metrics.transactions if metrics is not None else None),
        telemetry,
        TelemetryStreams(telemetry, config.telemetry_streams_max, client_port.peers),
        send_timeout_s=config.send_timeout_ms / 1000,
        consumer=ConsumerService(
            store,
            topics,
            hub,
            clock,
            config.broker_name,
            endpoint,
            ConsumerLimits(
                invisible_ms_min=config.invisible_duration_ms_min,
                invisible_ms_max=config.invisible_duration_ms_max,
                polling_ms_min=config.long_polling_timeout_ms_min,
                polling_ms_max=config.long_polling_timeout_ms_max,
                batch_max=config.consumer_receive_batch_size,
                auto_renew_invisible_ms=config.auto_renew_invisible_ms,
            ),
            renewer,
        ),
        clock=clock,
        traffic=metrics.traffic if metrics is not None else None,
        offsets=offsets,
        guard=guard,
        queue_wait_s=pool.waited_s,
        queue_wait_max_s=config.put_queue_wait_max_ms / 1000,
        peers=client_port.peers,
    )
    s_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    add_pull_service(server, RawPullService(offsets, store), guard, client_port.peers)
    add_admin_service(
        server,
        store,
        topics.invalidate,
        checks=TransactionCheckRelay(telemetry.registry, halves),
        guard=guard,
        peers=client_port.peers,
        telemetry=telemetry,
    )

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME, PULL_SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, PULL_SERVICE_NAME, ADMIN_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )

    if metrics is not None:
        metrics.watch(sink.stats, lambda: len(telemetry.registry), store.consumer_stats_report)
        metrics.watch_connections(telemetry.registry.sessions)
        if renewer is not None:
            metrics.watch_renewals(renewer.stats)
    log.info(
        "broker client port %s (%s), advertising %s",
        format_address(config.host, port),
        TLS_MODE_TEXT[config.tls_mode],
        format_address(*endpoint),
    )
    certificate = client_port.certificate
    if certificate is not None:
        log.info(
            "TLS certificate %s (%s), SHA-256 fingerprint %s",
            certificate.cert_path or "in memory",
            "self-signed by pyrmq" if certificate.generated else "configured",
            certificate.fingerprint,
        )
    return BrokerServer(
        server,
        port,
        endpoint,
        servicer,
        sink,
        topics,
        telemetry,
        health_servicer,
        hub,
        watch_start,
        watch_stop,
        client_port,
        renewer=renewer,
    )


def arrival_watch(store: StoreClient, hub: ArrivalHub) -> tuple[Callable[[], None], Callable[[], None]]:
    """(start, stop) of the thread that follows the store's WatchArrivals stream into ``hub``
    (one stream for the whole broker; parked ReceiveMessage calls wait on the hub)."""
    stopped = threading.Event()
    thread = threading.Thread(
        target=store.watch_arrivals, args=((), hub.notify, hub.notify_all, stopped), name="arrival-watch", daemon=True
    )

    def stop() -> None:
        stopped.set()
        store.stop_watching()
        hub.notify_all()
        if thread.is_alive():
            thread.join(2.0)

    return thread.start, stop
