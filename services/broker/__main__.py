"""``python -m services.broker``: command line -> BrokerConfig -> gRPC server.

Waits for the store to serve, then prints exactly one line on stdout once the broker accepts
RocketMQ v2 clients (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-broker ready grpc=127.0.0.1:8081 metrics=http://127.0.0.1:9102/metrics store=127.0.0.1:10911 endpoint=127.0.0.1:8081

``endpoint`` is what routes advertise: the address clients connect to (``127.0.0.1:8081``
as the Python client's ``ClientConfiguration`` endpoints). Logs go to stderr. SIGTERM or
SIGINT stops the server (in-flight calls get a grace period) and exits 0.
"""
from __future__ import annotations

import argparse
import logging
import sys

from services.process import StopSignals, apply_cpu_affinity, configure_logging, format_address, tune_gc
from services.broker.config import SETTINGS, BrokerConfig
from services.rpc.tls import TlsFiles
from services.settings import settings_from_args, settings_parser
from services.broker.errors import StoreCallError
from services.broker.metrics import BrokerMetrics, MetricsHttpServer
from services.broker.rpc.grpc_store_client import GrpcStoreClient
from services.broker.rpc.server import BrokerServer, build_server

log = logging.getLogger("services.broker")

READY_PREFIX = "pyrmq-broker ready"
STOP_GRACE_S = 5.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> BrokerConfig:
    """BrokerConfig from the command line, the environment and the config file (services/settings.py);
    SettingsError (a ValueError) if a setting is unknown, malformed or missing."""
    parser = settings_parser("broker", SETTINGS, "python -m services.broker",
                             "Run the pyrmq broker (RocketMQ v2 gRPC frontend).")
    parser.add_argument("--no-auto-create-topic", dest="auto_create_topic_enable", action="store_const",
                        const="false", default=argparse.SUPPRESS,
                        help="answer TOPIC_NOT_FOUND for unknown topics instead of creating them")
    parser.add_argument("--no-put-coalescing", dest="put_coalescing_enable", action="store_const",
                        const="false", default=argparse.SUPPRESS,
                        help="one store PutMessages per message instead of one per batch of concurrent sends")
    return BrokerConfig(**settings_from_args("broker", SETTINGS, parser.parse_args(argv), environ))


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    try:
        config = load_config(argv)
        configure_logging("broker", config.log_level, config.log_format)
        cpus = apply_cpu_affinity(config.cpu_affinity)
        if cpus:
            log.info("running on CPUs %s", ",".join(map(str, sorted(cpus))))
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()

    store = GrpcStoreClient(config.store_address, rpc_timeout_s=config.store_rpc_timeout_ms / 1000, tls=TlsFiles(
        config.store_tls_ca_path, config.store_tls_cert_path, config.store_tls_key_path),
        put_stream=config.put_stream_enable)
    broker: BrokerServer | None = None
    metrics_http: MetricsHttpServer | None = None
    try:
        log.info("waiting for the store at %s", config.store_address)
        if not store.wait_ready(config.store_connect_timeout_ms / 1000, give_up=lambda: bool(received)):
            log.info("stopped before the store was ready")
            return 0
        metrics = BrokerMetrics()
        broker = build_server(config, store, metrics=metrics)
        if config.metrics_port >= 0:
            metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        broker.start()
        tune_gc(config.gc_gen0_threshold)
        grpc_address = format_address(config.host, broker.port)
        endpoint = format_address(*broker.endpoint)
        metrics_url = metrics_http.url if metrics_http else "off"
        log.info("broker serving gRPC on %s (clients: %s), store %s", grpc_address, endpoint, config.store_address)
        print(f"{READY_PREFIX} grpc={grpc_address} metrics={metrics_url} store={config.store_address} "
              f"endpoint={endpoint}", flush=True)
        log.info("received %s, stopping", received.wait())
    except (OSError, StoreCallError) as exc:  # a port that cannot be bound; no store
        log.error("broker failed: %s", exc)
        return 1
    except Exception:
        log.exception("broker failed")
        return 1
    finally:
        if broker is not None:
            broker.stop(STOP_GRACE_S)
            log.info("gRPC server stopped")
        if metrics_http is not None:
            metrics_http.close()
        store.close()
        log.info("broker stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
