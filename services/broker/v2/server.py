"""The broker's gRPC shell: MessagingService, Pull (raw-record pulls), Admin, grpc health and
server reflection over a core built by ``services/broker/assembly.py``.

Two steps, because the core's routes advertise the bound port (pass port 0 for a free one):
``bind_server`` makes the grpc server (worker pool, interceptors, options) and binds the client
port (``BoundServer``: the port and the endpoint routes advertise); ``build_server`` adds the
servicers over the built core and returns a ``BrokerServer``, *not started*. ``stop`` reports
NOT_SERVING, ends the Telemetry streams (which never end by themselves), stops the server
with a grace period, then drains the send queue.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import grpc
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.broker.assembly import BrokerCore
from services.broker.broker_group_router import RoutedProducer
from services.broker.broker_groups import BrokerGroups
from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub
from services.broker.front import FrontPlan, FrontWatchdog, HaproxyFront, listen_socket
from services.broker.metrics import BrokerMetrics
from services.broker.put_coalescer import PutSink
from services.broker.renewal import ReceiptRenewer
from services.broker.telemetry import TelemetryService
from services.broker.tls_cert import ServerCertificate, certificate_hosts, load_configured, load_or_create
from services.broker.topics import TopicRegistry
from services.broker.v2.admin_servicer import ADMIN_SERVICE_NAME, add_admin_service
from services.broker.v2.pool import TimedThreadPool
from services.broker.v2.pull_servicer import PULL_SERVICE_NAME, add_pull_service
from services.broker.v2.servicer import MessagingServicer
from services.broker.v2.status import DIRECT, Peers
from services.broker.v2.telemetry_stream import TelemetryStreams
from services.runtime.clock import Clock
from services.runtime.process import format_address
from services.runtime.rpc.decode_guard import DecodeGuardInterceptor

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
    core: BrokerCore
    health: health.HealthServicer
    client_port: ClientPort
    _watchdog: FrontWatchdog | None = field(default=None, init=False)

    @property
    def broker_groups(self) -> BrokerGroups:  # one BrokerGroupCore per broker group (services/broker/broker_groups.py)
        return self.core.broker_groups

    @property
    def telemetry(self) -> TelemetryService:
        return self.core.telemetry

    @property
    def producer(self) -> RoutedProducer:
        return self.core.producer

    # The home group's parts (all there is with one group).
    @property
    def sink(self) -> PutSink:
        return self.broker_groups.home.sink

    @property
    def topics(self) -> TopicRegistry:
        return self.broker_groups.home.topics

    @property
    def hub(self) -> ArrivalHub:
        return self.broker_groups.home.hub

    @property
    def renewer(self) -> ReceiptRenewer | None:  # None: auto_renew_enable is off
        return self.broker_groups.home.renewer

    def watch_stop(self) -> None:
        for core in self.broker_groups.cores():
            core.watch_stop()

    def start(self) -> None:
        self.server.start()
        self.broker_groups.start()
        front = self.client_port.front
        if front is not None:
            front.start()
            self._watchdog = FrontWatchdog(front)
            self._watchdog.start()

    def stop(self, grace_s: float = 5.0) -> None:
        self.health.enter_graceful_shutdown()
        self.servicer.close()
        self.broker_groups.stop_threads()
        # Bounded: a call that never finishes must not hang a SIGTERM shutdown (seen about once
        # in eight runs of the bad-input suite); gRPC cancels what is left after the grace.
        if not self.server.stop(grace_s).wait(grace_s + STOP_WAIT_EXTRA_S):
            log.warning("gRPC server not stopped %.0f s after the grace period; going on", STOP_WAIT_EXTRA_S)
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.client_port.front is not None:
            self.client_port.front.stop()  # after gRPC's grace: in-flight calls finish through it
        self.broker_groups.close_sinks()


def server_certificate(config: BrokerConfig, clock: Clock) -> ServerCertificate:
    """The configured certificate, else the self-signed one (services/broker/tls_cert.py);
    OSError if files cannot be read or written."""
    if config.tls_cert_path:
        return load_configured(config.tls_cert_path, config.tls_key_path)
    return load_or_create(config.data_dir, certificate_hosts(config.host, config.advertised_host), clock.now_ms())


@dataclass
class ClientPort:
    """The client port as bound: its port number, the certificate of its TLS connections, the
    HAProxy front of ``tls_mode = both`` (not started), and a loopback port this process alone
    serves in plaintext (``reuse_port``: other brokers share the client port, and txcheck must
    reach each one; 0: none)."""

    port: int
    certificate: ServerCertificate | None
    front: HaproxyFront | None = None
    local_port: int = 0

    @property
    def peers(self) -> Peers:
        return self.front.peers if self.front is not None else DIRECT


def bind_client_port(server: grpc.Server, config: BrokerConfig, clock: Clock) -> ClientPort:
    """Bind the client port as ``config.tls_mode`` says (OSError if it cannot): gRPC on the port
    itself (plaintext, tls), or on two loopback ports behind HAProxy (both)."""
    address = format_address(config.host, config.port)
    try:
        if config.tls_mode == "plaintext":
            port = _bound(server.add_insecure_port(address), address)
            return ClientPort(port, None, None, _local_port(server, config))
        certificate = server_certificate(config, clock)
        credentials = grpc.ssl_server_credentials([(certificate.key_pem, certificate.cert_pem)])
        if config.tls_mode == "tls":
            port = _bound(server.add_secure_port(address, credentials), address)
            return ClientPort(port, certificate, None, _local_port(server, config))
        plain = _bound(server.add_insecure_port("127.0.0.1:0"), "127.0.0.1:0")
        secure = _bound(server.add_secure_port("127.0.0.1:0", credentials), "127.0.0.1:0")
    except RuntimeError as exc:  # grpc's "Failed to bind"
        raise OSError(f"cannot bind the broker's gRPC port at {address} (in use?)") from exc
    try:
        listen = listen_socket(config.host, config.port, reuse_port=config.reuse_port)
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
    return ClientPort(listen.getsockname()[1], certificate, front, plain if config.reuse_port else 0)


def _local_port(server: grpc.Server, config: BrokerConfig) -> int:
    """``reuse_port``: a plaintext loopback port of this process's own, else none (0)."""
    return _bound(server.add_insecure_port("127.0.0.1:0"), "127.0.0.1:0") if config.reuse_port else 0


def _bound(port: int, address: str) -> int:
    if port == 0:
        raise OSError(f"cannot bind the broker's gRPC port at {address} (in use?)")
    return port


@dataclass
class BoundServer:
    """The grpc server with its client port bound and no service yet."""

    server: grpc.Server
    pool: TimedThreadPool
    client_port: ClientPort
    endpoint: tuple[str, int]  # advertised in routes


def bind_server(config: BrokerConfig, clock: Clock, metrics: BrokerMetrics | None = None) -> BoundServer:
    """The grpc server, not started, its client port bound as ``config.tls_mode`` says (OSError
    if it cannot)."""
    pool = TimedThreadPool(config.grpc_workers_max, "broker-rpc", clock.monotonic_s)
    server = grpc.server(
        pool,
        interceptors=[*([metrics.interceptor] if metrics else []), DecodeGuardInterceptor()],
        options=[
            ("grpc.max_receive_message_length", config.grpc_message_size_max_bytes),
            ("grpc.max_send_message_length", config.grpc_message_size_max_bytes),
            ("grpc.so_reuseport", int(config.reuse_port)),  # off: a second broker on the port fails to bind
            # Clients may ping every second, with or without calls (services/v2client finds a
            # hung broker so); gRPC's default takes pings under 5 min apart as abuse (GOAWAY).
            # Half that, so a timer firing a little early is no strike.
            ("grpc.http2.min_ping_interval_without_data_ms", 500),
            ("grpc.keepalive_permit_without_calls", 1),
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
    return BoundServer(server, pool, client_port, config.advertised_endpoint(client_port.port))


def build_server(bound: BoundServer, core: BrokerCore, metrics: BrokerMetrics | None = None) -> BrokerServer:
    """The servicers over ``core`` on ``bound``'s server (``metrics``: its traffic counters)."""
    config, server, client_port, peers = core.config, bound.server, bound.client_port, bound.client_port.peers
    servicer = MessagingServicer(
        core.routes,
        core.producer,
        core.transactions,
        core.telemetry,
        TelemetryStreams(core.telemetry, config.telemetry_streams_max, peers),
        send_timeout_s=config.send_timeout_ms / 1000,
        consumer=core.consumer,
        clock=core.clock,
        traffic=metrics.traffic if metrics is not None else None,
        offsets=core.offsets,
        guard=core.guard,
        queue_wait_s=bound.pool.waited_s,
        queue_wait_max_s=config.put_queue_wait_max_ms / 1000,
        peers=peers,
    )
    s_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    add_pull_service(server, core.offsets.raw_pull, core.guard, peers)  # PullRecords: the named group
    add_admin_service(server, core, peers)

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME, PULL_SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, PULL_SERVICE_NAME, ADMIN_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    log.info(
        "broker client port %s (%s), advertising %s",
        format_address(config.host, client_port.port),
        TLS_MODE_TEXT[config.tls_mode],
        format_address(*bound.endpoint),
    )
    certificate = client_port.certificate
    if certificate is not None:
        log.info(
            "TLS certificate %s (%s), SHA-256 fingerprint %s",
            certificate.cert_path or "in memory",
            "self-signed by pyrmq" if certificate.generated else "configured",
            certificate.fingerprint,
        )
    return BrokerServer(server, client_port.port, bound.endpoint, servicer, core, health_servicer, client_port)
