"""``python -m services.store``: command line -> StoreConfig -> FileStore -> gRPC server.

Prints exactly one line on stdout, once the store has recovered and both the gRPC and the
metrics endpoints accept connections (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-store ready grpc=127.0.0.1:10911 metrics=http://127.0.0.1:9101/metrics data=DIR/store

Everything else goes to the log (stderr). SIGTERM or SIGINT stops the server (in-flight calls
get a grace period), shuts the store down cleanly, and exits 0 (services/runtime/service_main.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from contextlib import ExitStack

from services.runtime.clock import SteadyClock
from services.runtime.metrics import MetricsHttpServer
from services.runtime.process import StopSignals, format_address, tune_gc
from services.runtime.rpc.tls import TlsFiles
from services.runtime.service_main import retry_while_locked, run_service
from services.runtime.settings import settings_from_args, settings_parser
from services.store.config import SETTINGS, StoreConfig, config_from_settings
from services.store.errors import StoreLockedError
from services.store.metrics import StoreMetrics
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore

log = logging.getLogger("services.store")

STOP_GRACE_S = 5.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> StoreConfig:
    """StoreConfig from the command line, the environment and the config file
    (services/runtime/settings.py); SettingsError (a ValueError) if a setting is unknown,
    malformed or missing."""
    parser = settings_parser("store", SETTINGS, "python -m services.store", "Run the pyrmq store service.")
    return config_from_settings(settings_from_args("store", SETTINGS, parser.parse_args(argv), environ))


def start(config: StoreConfig, stack: ExitStack, received: StopSignals) -> Mapping[str, object]:
    # A steady clock: a jump of this host's clock does not expire every pop's invisible time at
    # once, nor stamp records out of order (services/runtime/clock.py).
    store = FileStore(config, SteadyClock())
    stack.callback(store.shutdown)
    log.info("starting store at %s (flush %s)", config.store_root, config.flush_mode.name)
    retry_while_locked(
        store.start,
        StoreLockedError,
        config.lock_wait_ms / 1000,
        received,
        on_wait=lambda: log.info("store root is locked by another process; waiting for it to exit"),
    )
    metrics = StoreMetrics(
        store,
        labels={"cluster": config.cluster_name, "node_id": config.broker_name, "node_type": "store"},
        replication=store.replication,
    )
    tune_gc(config.gc_gen0_threshold)  # after start-up: recovery's and metadata's objects are frozen
    server, port = build_server(
        store,
        config.host,
        config.port,
        metrics=metrics,
        tls=TlsFiles(config.tls_client_ca_path, config.tls_cert_path, config.tls_key_path),
    )
    metrics_url = "off"
    if config.metrics_port >= 0:
        metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        stack.callback(metrics_http.close)
        metrics_url = metrics_http.url
    server.start()
    stack.callback(stop_server, server, STOP_GRACE_S)
    grpc_address = format_address(config.host, port)
    log.info("store serving gRPC on %s, metrics %s", grpc_address, metrics_url)
    return {"grpc": grpc_address, "metrics": metrics_url, "data": config.store_root}


def main(argv: list[str] | None = None) -> int:
    return run_service("store", argv, load_config, start, label="store service")


if __name__ == "__main__":
    sys.exit(main())
