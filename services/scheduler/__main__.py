"""``python -m services.scheduler``: command line -> SchedulerConfig -> SchedulerService.

Waits for the store, recovers its files, then prints exactly one line on stdout once the
timer and delay-level loops run and the health / metrics endpoints accept connections::

    pyrmq-scheduler ready grpc=127.0.0.1:10915 metrics=http://127.0.0.1:9103/metrics store=127.0.0.1:10911 data=DIR/scheduler

Logs go to stderr. SIGTERM or SIGINT stops the loops, flushes and checkpoints the timer files,
and exits 0 (services/runtime/service_main.py). A ``kill -9`` at any moment is safe: the next
start recovers (timer_store.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from contextlib import ExitStack

from services.runtime.clock import SteadyClock
from services.runtime.metrics import MetricsHttpServer
from services.runtime.process import StopSignals, format_address
from services.runtime.rpc.health import HealthServer
from services.runtime.rpc.tls import TlsFiles
from services.runtime.service_main import retry_while_locked, run_service
from services.runtime.settings import settings_from_args, settings_parser
from services.scheduler.config import SETTINGS, SchedulerConfig, config_from_settings
from services.scheduler.errors import SchedulerLockedError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.service import SchedulerService
from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreError

log = logging.getLogger("services.scheduler")

HEALTH_SERVICE_NAME = "pyrmq.scheduler"  # the health service name probes ask for ("" works too)


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> SchedulerConfig:
    """SchedulerConfig from the command line, the environment and the config file
    (services/runtime/settings.py); SettingsError (a ValueError) if a setting is unknown or malformed."""
    parser = settings_parser(
        "scheduler",
        SETTINGS,
        "python -m services.scheduler",
        "Run the pyrmq scheduler (delay levels and timer messages).",
    )
    return config_from_settings(settings_from_args("scheduler", SETTINGS, parser.parse_args(argv), environ))


def start(config: SchedulerConfig, stack: ExitStack, received: StopSignals) -> Mapping[str, object] | None:
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
    # A steady clock: a jump of this host's clock neither fires delay and timer messages early
    # nor holds them back (services/runtime/clock.py).
    service = SchedulerService(config, store, watch=store, clock=SteadyClock())
    log.info("waiting for the store at %s", store.address)
    if not store.wait_ready(config.store_connect_timeout_ms / 1000, give_up=lambda: bool(received)):
        return None
    retry_while_locked(service.open, SchedulerLockedError, config.lock_wait_ms / 1000, received)
    service.start()
    stack.callback(service.stop)
    metrics = SchedulerMetrics(service.stats, service.clock)
    metrics_url = "off"
    if config.metrics_port >= 0:
        metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        stack.callback(metrics_http.close)
        metrics_url = metrics_http.url
    health = HealthServer(config.host, config.port, HEALTH_SERVICE_NAME)
    health.start()
    stack.callback(health.stop)
    grpc_address = format_address(config.host, health.port)
    log.info("scheduler running: health %s, metrics %s, store %s", grpc_address, metrics_url, store.address)
    return {"grpc": grpc_address, "metrics": metrics_url, "store": store.address, "data": config.root}


def main(argv: list[str] | None = None) -> int:
    return run_service("scheduler", argv, load_config, start, expected_errors=(StoreError, SchedulerLockedError))


if __name__ == "__main__":
    sys.exit(main())
