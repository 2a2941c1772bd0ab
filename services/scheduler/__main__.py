"""``python -m services.scheduler``: command line -> SchedulerConfig -> SchedulerService.

Waits for the store, recovers its files, then prints exactly one line on stdout once the
timer and delay-level loops run and the health / metrics endpoints accept connections::

    pyrmq-scheduler ready grpc=127.0.0.1:10915 metrics=http://127.0.0.1:9103/metrics store=127.0.0.1:10911 data=DIR/scheduler

Logs go to stderr. SIGTERM or SIGINT stops the loops, flushes and checkpoints the timer files,
and exits 0. A ``kill -9`` at any moment is safe: the next start recovers (timer_store.py).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from services.process import StopSignals, configure_logging, format_address
from services.scheduler.config import SchedulerConfig
from services.scheduler.errors import SchedulerLockedError, StoreUnavailableError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.rpc.server import HealthServer
from services.scheduler.rpc.store_client import GrpcSchedulerStore
from services.scheduler.service import SchedulerService
from services.store.metrics import MetricsHttpServer

log = logging.getLogger("services.scheduler")

READY_PREFIX = "pyrmq-scheduler ready"
LOCK_RETRY_INTERVAL_S = 0.2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.scheduler",
                                     description="Run the pyrmq scheduler (delay levels and timer messages).")
    parser.add_argument("--data-dir", type=Path, required=True, help="data directory; files go to DATA_DIR/scheduler")
    parser.add_argument("--store-address", default="127.0.0.1:10911", help="the store service (default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="health gRPC listen address (default %(default)s)")
    parser.add_argument("--port", type=int, default=10915,
                        help="health gRPC port, 0 for any free one (default %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9103,
                        help="Prometheus /metrics port on 127.0.0.1, 0 for any free one, -1 to disable "
                             "(default %(default)s)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="Prometheus /metrics listen address (default %(default)s: loopback only, the endpoint is unauthenticated)")
    parser.add_argument("--store-connect-timeout-ms", type=int, default=30_000,
                        help="give up (exit 1) if the store does not serve within this time (default %(default)s)")
    parser.add_argument("--lock-wait-ms", type=int, default=10_000,
                        help="how long to wait for a scheduler that still holds the directory (default %(default)s)")
    parser.add_argument("--timer-precision-ms", type=int, default=None, help="wheel slot width (default 1000)")
    parser.add_argument("--timer-max-delay-ms", type=int, default=None, help="farthest timer kept (default 30 days)")
    parser.add_argument("--timerlog-file-size-bytes", type=int, default=None, help="TimerLog segment size (100 MiB)")
    parser.add_argument("--delay-levels", default=None, help='messageDelayLevel (default "1s 5s ... 2h")')
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> SchedulerConfig:
    optional = {name: getattr(args, name) for name in
                ("timer_precision_ms", "timer_max_delay_ms", "timerlog_file_size_bytes", "delay_levels")
                if getattr(args, name) is not None}
    return SchedulerConfig(root=args.data_dir.resolve() / "scheduler", store_address=args.store_address, **optional)


def open_when_unlocked(service: SchedulerService, wait_s: float, received: StopSignals) -> None:
    """``service.open()``, waiting while a scheduler killed a moment ago still holds the lock."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            service.open()
            return
        except SchedulerLockedError:
            if time.monotonic() >= deadline or received:
                raise
            time.sleep(LOCK_RETRY_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2
    received = StopSignals()
    store = GrpcSchedulerStore(config.store_address, rpc_timeout_s=config.store_rpc_timeout_ms / 1000)
    service = SchedulerService(config, store, watch=store.watch_arrivals)
    health: HealthServer | None = None
    metrics_http: MetricsHttpServer | None = None
    started = False
    try:
        log.info("waiting for the store at %s", config.store_address)
        if not store.wait_ready(args.store_connect_timeout_ms / 1000, give_up=lambda: bool(received)):
            log.info("stopped before the store was ready")
            return 0
        open_when_unlocked(service, args.lock_wait_ms / 1000, received)
        service.start()
        started = True
        metrics = SchedulerMetrics(service.stats)
        if args.metrics_port >= 0:
            metrics_http = MetricsHttpServer(metrics.registry, args.metrics_port, args.metrics_host)
        health = HealthServer(args.host, args.port)
        health.start()
        grpc_address = format_address(args.host, health.port)
        metrics_url = metrics_http.url if metrics_http else "off"
        log.info("scheduler running: health %s, metrics %s, store %s", grpc_address, metrics_url, config.store_address)
        print(f"{READY_PREFIX} grpc={grpc_address} metrics={metrics_url} store={config.store_address} "
              f"data={config.root}", flush=True)
        log.info("received %s, stopping", received.wait())
    except (OSError, StoreUnavailableError, SchedulerLockedError) as exc:
        log.error("scheduler failed: %s", exc)
        return 1
    except Exception:
        log.exception("scheduler failed")
        return 1
    finally:
        if health is not None:
            health.stop()
        if metrics_http is not None:
            metrics_http.close()
        if started:
            service.stop()
        store.close()
        log.info("scheduler stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
