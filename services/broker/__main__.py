"""``python -m services.broker``: command line -> BrokerConfig -> the broker's objects
(``build_broker``: the gRPC server and its ports, the core of services/broker/assembly.py, the
servicers over it).

Waits for the store to serve, then prints exactly one line on stdout once the broker accepts
RocketMQ v2 clients (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-broker ready grpc=127.0.0.1:8081 remoting=127.0.0.1:9876 metrics=http://127.0.0.1:9102/metrics store=127.0.0.1:10911 endpoint=127.0.0.1:8081 tls=both cert=data/broker/tls/broker.crt

``tls`` is the client port's ``tls_mode`` (both: TLS and plaintext on that one port) and ``cert``
the certificate TLS clients can trust (``memory``: a new self-signed one each start, no
``data_dir``; ``-``: plaintext only). With ``reuse_port`` (several brokers on one client port),
``local`` is a plaintext loopback port this process alone serves (txcheck reaches each broker
there). ``endpoint`` is what routes advertise: the address clients connect to (``127.0.0.1:8081``
as the Python client's ``ClientConfiguration`` endpoints). Logs go to stderr. SIGTERM or
SIGINT stops the server (in-flight calls get a grace period) and exits 0
(services/runtime/service_main.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from contextlib import ExitStack

from services.broker.assembly import build_core
from services.broker.broker_groups import ClusterView
from services.broker.config import SETTINGS, BrokerConfig
from services.broker.errors import StoreCallError
from services.broker.metrics import BrokerMetrics
from services.broker.remoting.door import build_remoting
from services.broker.v2.admin_servicer import V2ClientCommands
from services.broker.v2.server import BrokerServer, bind_server, build_server
from services.coordination.route_view import RouteStore, RouteView, registered_groups
from services.runtime.clock import Clock, SteadyClock
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.metrics import MetricsHttpServer
from services.runtime.process import StopSignals, format_address, tune_gc
from services.runtime.rpc.tls import TlsFiles
from services.runtime.service_main import run_service
from services.runtime.settings import settings_from_args, settings_parser
from services.store.client.client import GrpcStoreClient, StoreClient

log = logging.getLogger("services.broker")

STOP_GRACE_S = 5.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> BrokerConfig:
    """BrokerConfig from the command line, the environment and the config file
    (services/runtime/settings.py); SettingsError (a ValueError) if a setting is unknown,
    malformed or missing."""
    parser = settings_parser(
        "broker", SETTINGS, "python -m services.broker", "Run the pyrmq broker (RocketMQ v2 gRPC frontend)."
    )
    auto_create = parser.add_mutually_exclusive_group()
    auto_create.add_argument(
        "--auto-create-topic",
        dest="auto_create_topic_enable",
        action="store_const",
        const="true",
        default=argparse.SUPPRESS,
        help="QueryRoute and SendMessage create an unknown topic (auto_create_topic_enable = true)",
    )
    auto_create.add_argument(
        "--no-auto-create-topic",
        dest="auto_create_topic_enable",
        action="store_const",
        const="false",
        default=argparse.SUPPRESS,
        help="answer TOPIC_NOT_FOUND for an unknown topic (the default, as RocketMQ 5's proxy)",
    )
    parser.add_argument(
        "--no-put-coalescing",
        dest="put_coalescing_enable",
        action="store_const",
        const="false",
        default=argparse.SUPPRESS,
        help="one store PutMessages per message instead of one per batch of concurrent sends",
    )
    return BrokerConfig(**settings_from_args("broker", SETTINGS, parser.parse_args(argv), environ))


def store_client(config: BrokerConfig, group: str) -> GrpcStoreClient:
    """A client of ``group``'s store: its master as etcd says, or ``store_address`` without etcd."""
    return GrpcStoreClient(
        config.store_address,
        rpc_timeout_s=config.store_rpc_timeout_ms / 1000,
        tls=TlsFiles(config.store_tls_ca_path, config.store_tls_cert_path, config.store_tls_key_path),
        put_stream=config.put_stream_enable,
        etcd_endpoints=config.etcd_endpoints,
        group=group,
        failover_timeout_s=config.store_failover_timeout_ms / 1000,
    )


def build_broker(
    config: BrokerConfig,
    store: StoreClient,
    clock: Clock | None = None,
    metrics: BrokerMetrics | None = None,
    cluster: ClusterView | None = None,
) -> BrokerServer:
    """The broker, not started, in dependency order: the grpc server with its client port bound
    (routes advertise the bound port), the core over ``store`` (the home group's client) and
    ``cluster`` (routes and clients of other broker groups; None: the home group alone), then the
    servicers over the core."""
    clock = clock or SteadyClock()  # a jump of this host's clock moves no deadline at once (services/runtime/clock.py)
    bound = bind_server(config, clock, metrics)
    core = build_core(config, store, bound.endpoint, V2ClientCommands(), clock, metrics, cluster)
    return build_server(bound, core, metrics)


def start(config: BrokerConfig, stack: ExitStack, received: StopSignals) -> Mapping[str, object] | None:
    store = store_client(config, config.broker_name)
    stack.callback(store.close)
    log.info("waiting for the store at %s", store.address)
    if not store.wait_ready(config.store_connect_timeout_ms / 1000, give_up=lambda: bool(received)):
        return None
    cluster: ClusterView | None = None
    if config.etcd_endpoints:
        # Topics over several broker groups: routes from etcd, a client per group they name.
        etcd = EtcdClient([e.strip() for e in config.etcd_endpoints.split(",") if e.strip()])
        stack.callback(etcd.close)
        routes = RouteView(etcd)
        stack.callback(routes.close)
        if not routes.open(config.store_connect_timeout_ms / 1000):
            log.warning("no topic routes from etcd yet: topics stay on %s until they come", config.broker_name)

        def connect(group: str) -> GrpcStoreClient:
            client = store_client(config, group)
            stack.callback(client.close)
            return client

        cluster = ClusterView(routes, connect, RouteStore(etcd), lambda: registered_groups(etcd))
    metrics = BrokerMetrics()
    broker = build_broker(config, store, metrics=metrics, cluster=cluster)
    metrics_url = "off"
    if config.metrics_port >= 0:
        metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        stack.callback(metrics_http.close)
        metrics_url = metrics_http.url
    broker.start()
    stack.callback(broker.stop, STOP_GRACE_S)
    tune_gc(config.gc_gen0_threshold)
    grpc_address = format_address(config.host, broker.port)
    endpoint = format_address(*broker.endpoint)
    log.info("broker serving gRPC on %s (clients: %s), store %s", grpc_address, endpoint, store.address)
    remoting: dict[str, str] = {}
    if config.remoting_port >= 0:
        door = build_remoting(
            broker.core,
            broker.endpoint[0],
            config.host,
            config.remoting_port,
            config.reuse_port,
            metrics.rpc_latency,
            broker.client_port.certificate,
        )
        door.start()
        stack.callback(door.stop)
        remoting["remoting"] = door.context.address
        log.info("broker serving RocketMQ remoting on %s", format_address(config.host, door.port))
    certificate = broker.client_port.certificate
    local_port = broker.client_port.local_port
    return {
        "grpc": grpc_address,
        **remoting,
        "metrics": metrics_url,
        "store": store.address,
        "endpoint": endpoint,
        "tls": config.tls_mode,
        "cert": (certificate.cert_path or "memory") if certificate is not None else "-",
        **({"local": format_address("127.0.0.1", local_port)} if local_port else {}),
    }


def main(argv: list[str] | None = None) -> int:
    return run_service("broker", argv, load_config, start, expected_errors=(StoreCallError,))


if __name__ == "__main__":
    sys.exit(main())
