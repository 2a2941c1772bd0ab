"""``python -m services.txcheck``: command line -> TxCheckConfig -> the check loop.

Waits for the store to serve, then prints exactly one line on stdout once the health server,
the metrics endpoint and the check loop run (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-txcheck ready grpc=127.0.0.1:10914 metrics=http://127.0.0.1:9104/metrics store=127.0.0.1:10911 broker=127.0.0.1:8081

Logs go to stderr. SIGTERM or SIGINT stops the loop after the pass in progress and exits 0;
kill -9 at any moment is safe too (progress is in the store: README.md, "Crash safety").
"""
from __future__ import annotations

import logging
import sys

from services.process import StopSignals, configure_logging, format_address
from services.txcheck.clock import SystemClock
from services.rpc.tls import TlsFiles
from services.settings import settings_from_args, settings_parser
from services.txcheck.config import SETTINGS, TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker
from services.txcheck.metrics import MetricsHttpServer, TxCheckMetrics
from services.txcheck.model import StoreUnavailable
from services.txcheck.rpc.broker_client import GrpcProducers
from services.txcheck.rpc.server import HealthServer
from services.txcheck.rpc.store_client import GrpcTxStore
from services.txcheck.service import CheckService

log = logging.getLogger("services.txcheck")

READY_PREFIX = "pyrmq-txcheck ready"
STOP_GRACE_S = 2.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> TxCheckConfig:
    """TxCheckConfig from the command line, the environment and the config file
    (services/settings.py); SettingsError (a ValueError) if a setting is unknown or malformed."""
    parser = settings_parser("txcheck", SETTINGS, "python -m services.txcheck", "Run the pyrmq transaction checker.")
    return TxCheckConfig(**settings_from_args("txcheck", SETTINGS, parser.parse_args(argv), environ))


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    try:
        config = load_config(argv)
        configure_logging("txcheck", config.log_level, config.log_format)
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()
    clock = SystemClock()
    store = GrpcTxStore(config.store_address, rpc_timeout_s=config.store_rpc_timeout_ms / 1000, tls=TlsFiles(
        config.store_tls_ca_path, config.store_tls_cert_path, config.store_tls_key_path))
    producers = GrpcProducers(config.broker_addresses, rpc_timeout_s=config.broker_rpc_timeout_ms / 1000,
                              tls=TlsFiles(config.broker_tls_ca_path))
    health: HealthServer | None = None
    metrics_http: MetricsHttpServer | None = None
    service: CheckService | None = None
    try:
        log.info("waiting for the store at %s", config.store_address)
        if not store.wait_ready(config.store_connect_timeout_ms / 1000, clock, give_up=lambda: bool(received)):
            log.info("stopped before the store was ready")
            return 0
        checker = HalfMessageChecker(config, store, producers, clock)
        health = HealthServer(config.host, config.port)
        if config.metrics_port >= 0:
            metrics_http = MetricsHttpServer(TxCheckMetrics(checker.stats).registry, config.metrics_port,
                                             config.metrics_host)
        service = CheckService(checker, config, on_health=health.set_serving)
        health.start()
        service.start()
        grpc_address = format_address(config.host, health.port)
        metrics_url = metrics_http.url if metrics_http else "off"
        log.info("transaction checker running: store %s, brokers %s, timeout %d ms, interval %d ms, max %d checks",
                 config.store_address, ",".join(config.broker_addresses), config.transaction_timeout_ms,
                 config.check_interval_ms, config.check_max)
        print(f"{READY_PREFIX} grpc={grpc_address} metrics={metrics_url} store={config.store_address} "
              f"broker={','.join(config.broker_addresses)}", flush=True)
        log.info("received %s, stopping", received.wait())
    except (OSError, StoreUnavailable) as exc:  # a port that cannot be bound; no store
        log.error("txcheck failed: %s", exc)
        return 1
    except Exception:
        log.exception("txcheck failed")
        return 1
    finally:
        if service is not None:
            service.stop()
        if health is not None:
            health.stop(STOP_GRACE_S)
        if metrics_http is not None:
            metrics_http.close()
        producers.close()
        store.close()
        log.info("txcheck stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
