"""``python -m services.scheduler``: command line -> SchedulerConfig -> SchedulerService.

Waits for the store, recovers its files, then prints exactly one line on stdout once the
timer and delay-level loops run and the health / metrics endpoints accept connections::

    pyrmq-scheduler ready grpc=127.0.0.1:10915 metrics=http://127.0.0.1:9103/metrics store=127.0.0.1:10911 data=DIR/scheduler

Logs go to stderr. SIGTERM or SIGINT stops the loops, flushes and checkpoints the timer files,
and exits 0. A ``kill -9`` at any moment is safe: the next start recovers (timer_store.py).
"""
from __future__ import annotations

import logging
import sys
import time

from services.process import StopSignals, configure_logging, format_address
from services.scheduler.config import SETTINGS, SchedulerConfig, config_from_settings
from services.rpc.tls import TlsFiles
from services.settings import settings_from_args, settings_parser
from services.scheduler.errors import SchedulerLockedError, StoreUnavailableError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.rpc.server import HealthServer
from services.scheduler.rpc.store_client import GrpcSchedulerStore
from services.scheduler.service import SchedulerService
from services.store.metrics import MetricsHttpServer

log = logging.getLogger("services.scheduler")

READY_PREFIX = "pyrmq-scheduler ready"
LOCK_RETRY_INTERVAL_S = 0.2


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> SchedulerConfig:
    """SchedulerConfig from the command line, the environment and the config file
    (services/settings.py); SettingsError (a ValueError) if a setting is unknown or malformed."""
    parser = settings_parser("scheduler", SETTINGS, "python -m services.scheduler",
                             "Run the pyrmq scheduler (delay levels and timer messages).")
    return config_from_settings(settings_from_args("scheduler", SETTINGS, parser.parse_args(argv), environ))


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
    try:
        config = load_config(argv)
        configure_logging("scheduler", config.log_level, config.log_format)
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2
    received = StopSignals()
    store = GrpcSchedulerStore(config.store_address, rpc_timeout_s=config.store_rpc_timeout_ms / 1000, tls=TlsFiles(
        config.store_tls_ca_path, config.store_tls_cert_path, config.store_tls_key_path))
    service = SchedulerService(config, store, watch=store.watch_arrivals)
    health: HealthServer | None = None
    metrics_http: MetricsHttpServer | None = None
    started = False
    try:
        log.info("waiting for the store at %s", config.store_address)
        if not store.wait_ready(config.store_connect_timeout_ms / 1000, give_up=lambda: bool(received)):
            log.info("stopped before the store was ready")
            return 0
        open_when_unlocked(service, config.lock_wait_ms / 1000, received)
        service.start()
        started = True
        metrics = SchedulerMetrics(service.stats)
        if config.metrics_port >= 0:
            metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        health = HealthServer(config.host, config.port)
        health.start()
        grpc_address = format_address(config.host, health.port)
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
