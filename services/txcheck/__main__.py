"""``python -m services.txcheck``: command line -> TxCheckConfig -> the check loop.

Waits for the store to serve, then prints exactly one line on stdout once the health server,
the metrics endpoint and the check loop run (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-txcheck ready grpc=127.0.0.1:10914 metrics=http://127.0.0.1:9104/metrics store=127.0.0.1:10911 broker=127.0.0.1:8081

Logs go to stderr. SIGTERM or SIGINT stops the loop after the pass in progress and exits 0;
kill -9 at any moment is safe too (progress is in the store: README.md, "Crash safety").
"""
from __future__ import annotations

import argparse
import logging
import sys

from services.process import StopSignals, configure_logging, format_address
from services.txcheck.clock import SystemClock
from services.txcheck.config import TxCheckConfig
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = TxCheckConfig()
    parser = argparse.ArgumentParser(prog="python -m services.txcheck",
                                     description="Run the pyrmq transaction checker.")
    parser.add_argument("--store-address", default=defaults.store_address,
                        help="the store service, HOST:PORT (default %(default)s)")
    parser.add_argument("--broker-address", action="append", default=None,
                        help="a broker that relays checks to producers, HOST:PORT; repeat for several, or "
                             "separate with commas (default 127.0.0.1:8081)")
    parser.add_argument("--host", default=defaults.host, help="gRPC health listen address (default %(default)s)")
    parser.add_argument("--port", type=int, default=defaults.port,
                        help="gRPC health port, 0 for any free one (default %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9104,
                        help="Prometheus /metrics port on 127.0.0.1, 0 for any free one, -1 to disable "
                             "(default %(default)s)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="Prometheus /metrics listen address (default %(default)s: loopback only, the endpoint is unauthenticated)")
    parser.add_argument("--transaction-timeout-ms", type=int, default=defaults.transaction_timeout_ms,
                        help="check a half message older than this (default %(default)s)")
    parser.add_argument("--check-interval-ms", type=int, default=defaults.check_interval_ms,
                        help="one check pass per interval (default %(default)s)")
    parser.add_argument("--check-max", type=int, default=defaults.check_max,
                        help="checks before a half message goes to TRANS_CHECK_MAX_TIME_TOPIC (default %(default)s)")
    parser.add_argument("--store-connect-timeout-ms", type=int, default=defaults.store_connect_timeout_ms,
                        help="give up (exit 1) if the store does not serve within this time (default %(default)s)")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> TxCheckConfig:
    brokers = tuple(a.strip() for value in (args.broker_address or ["127.0.0.1:8081"])
                    for a in value.split(",") if a.strip())
    return TxCheckConfig(
        store_address=args.store_address, broker_addresses=brokers, host=args.host, port=args.port,
        transaction_timeout_ms=args.transaction_timeout_ms, check_interval_ms=args.check_interval_ms,
        check_max=args.check_max, store_connect_timeout_ms=args.store_connect_timeout_ms)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()
    clock = SystemClock()
    store = GrpcTxStore(config.store_address, rpc_timeout_s=config.store_rpc_timeout_ms / 1000)
    producers = GrpcProducers(config.broker_addresses, rpc_timeout_s=config.broker_rpc_timeout_ms / 1000)
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
        if args.metrics_port >= 0:
            metrics_http = MetricsHttpServer(TxCheckMetrics(checker.stats).registry, args.metrics_port, args.metrics_host)
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
