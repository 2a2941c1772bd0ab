"""``python -m services.txcheck``: command line -> TxCheckConfig -> the check loop.

Waits for the store to serve, then prints exactly one line on stdout once the health server,
the metrics endpoint and the check loop run (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-txcheck ready grpc=127.0.0.1:10914 metrics=http://127.0.0.1:9104/metrics store=127.0.0.1:10911 broker=127.0.0.1:8081

Logs go to stderr. SIGTERM or SIGINT stops the loop after the pass in progress and exits 0
(services/runtime/service_main.py); kill -9 at any moment is safe too (progress is in the
store: README.md, "Crash safety").
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from contextlib import ExitStack

from services.runtime.clock import SystemClock
from services.runtime.metrics import MetricsHttpServer
from services.runtime.process import StopSignals, format_address
from services.runtime.rpc.health import HealthServer
from services.runtime.rpc.tls import TlsFiles
from services.runtime.service_main import run_service
from services.runtime.settings import settings_from_args, settings_parser
from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreError
from services.txcheck.config import SETTINGS, TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker
from services.txcheck.metrics import TxCheckMetrics
from services.txcheck.rpc.broker_client import GrpcProducers
from services.txcheck.service import CheckService

log = logging.getLogger("services.txcheck")

HEALTH_SERVICE_NAME = "pyrmq.txcheck"
STOP_GRACE_S = 2.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> TxCheckConfig:
    """TxCheckConfig from the command line, the environment and the config file
    (services/runtime/settings.py); SettingsError (a ValueError) if a setting is unknown or malformed."""
    parser = settings_parser("txcheck", SETTINGS, "python -m services.txcheck", "Run the pyrmq transaction checker.")
    return TxCheckConfig(**settings_from_args("txcheck", SETTINGS, parser.parse_args(argv), environ))


def start(config: TxCheckConfig, stack: ExitStack, received: StopSignals) -> Mapping[str, object] | None:
    clock = SystemClock()
    store = GrpcStoreClient(
        config.store_address,
        rpc_timeout_s=config.store_rpc_timeout_ms / 1000,
        tls=TlsFiles(config.store_tls_ca_path, config.store_tls_cert_path, config.store_tls_key_path),
        put_stream=False,
        etcd_endpoints=config.etcd_endpoints,
        group=config.broker_name,
        failover_timeout_s=config.store_failover_timeout_ms / 1000,
    )
    stack.callback(store.close)
    producers = GrpcProducers(
        config.broker_addresses,
        rpc_timeout_s=config.broker_rpc_timeout_ms / 1000,
        tls=TlsFiles(config.broker_tls_ca_path),
    )
    stack.callback(producers.close)
    log.info("waiting for the store at %s", store.address)
    if not store.wait_ready(config.store_connect_timeout_ms / 1000, give_up=lambda: bool(received), clock=clock):
        return None
    checker = HalfMessageChecker(config, store, producers, clock)
    health = HealthServer(config.host, config.port, HEALTH_SERVICE_NAME)
    metrics_url = "off"
    if config.metrics_port >= 0:
        metrics_http = MetricsHttpServer(
            TxCheckMetrics(checker.stats).registry, config.metrics_port, config.metrics_host
        )
        stack.callback(metrics_http.close)
        metrics_url = metrics_http.url
    service = CheckService(checker, config, on_health=health.set_serving)
    health.start()
    stack.callback(health.stop, STOP_GRACE_S)
    service.start()
    stack.callback(service.stop)
    grpc_address = format_address(config.host, health.port)
    log.info(
        "transaction checker running: store %s, brokers %s, timeout %d ms, interval %d ms, max %d checks",
        store.address,
        ",".join(config.broker_addresses),
        config.transaction_timeout_ms,
        config.check_interval_ms,
        config.check_max,
    )
    return {
        "grpc": grpc_address,
        "metrics": metrics_url,
        "store": store.address,
        "broker": ",".join(config.broker_addresses),
    }


def main(argv: list[str] | None = None) -> int:
    return run_service("txcheck", argv, load_config, start, expected_errors=(StoreError,))


if __name__ == "__main__":
    sys.exit(main())
