"""``python -m services.store``: command line -> StoreConfig -> FileStore -> gRPC server.

Prints exactly one line on stdout, once the store has recovered and both the gRPC and the
metrics endpoints accept connections (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-store ready grpc=127.0.0.1:10911 metrics=http://127.0.0.1:9101/metrics data=DIR/store

Everything else goes to the log (stderr). SIGTERM or SIGINT stops the server (in-flight calls
get a grace period), shuts the store down cleanly, and exits 0.
"""
from __future__ import annotations

import logging
import sys
import time

from services.process import StopSignals, apply_cpu_affinity, configure_logging, format_address, tune_gc
from services.rpc.tls import TlsFiles
from services.settings import settings_from_args, settings_parser
from services.store.config import SETTINGS, StoreConfig, config_from_settings
from services.store.errors import StoreLockedError
from services.store.metrics import MetricsHttpServer, StoreMetrics
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore

log = logging.getLogger("services.store")

READY_PREFIX = "pyrmq-store ready"
STOP_GRACE_S = 5.0


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> StoreConfig:
    """StoreConfig from the command line, the environment and the config file (services/settings.py);
    SettingsError (a ValueError) if a setting is unknown, malformed or missing."""
    parser = settings_parser("store", SETTINGS, "python -m services.store", "Run the pyrmq store service.")
    return config_from_settings(settings_from_args("store", SETTINGS, parser.parse_args(argv), environ))


def start_when_unlocked(store: FileStore, wait_s: float, received: StopSignals) -> None:
    """``store.start()``, waiting up to ``wait_s`` while another process still holds the root's
    lock: a store killed a moment ago (kill -9 of ``pyrmq up``, a container restart) may not
    have exited yet. A stop signal ends the wait."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            store.start()
            return
        except StoreLockedError:
            if time.monotonic() >= deadline or received:
                raise
            log.info("store root is locked by another process; waiting for it to exit")
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    try:
        config = load_config(argv)
        configure_logging("store", config.log_level, config.log_format)
        cpus = apply_cpu_affinity(config.cpu_affinity)
        if cpus:
            log.info("running on CPUs %s", ",".join(map(str, sorted(cpus))))
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()

    store = FileStore(config)
    log.info("starting store at %s (flush %s)", config.store_root, config.flush_mode.name)
    try:
        start_when_unlocked(store, config.lock_wait_ms / 1000, received)
    except Exception:
        log.exception("store failed to start")
        store.shutdown()
        return 1
    metrics = StoreMetrics(store, labels={"cluster": config.cluster_name, "node_id": config.broker_name,
                                          "node_type": "store"})
    tune_gc(config.gc_gen0_threshold)  # after start-up: recovery's and metadata's objects are frozen
    metrics_http: MetricsHttpServer | None = None
    server = None
    try:
        server, port = build_server(store, config.host, config.port, metrics=metrics, tls=TlsFiles(
            config.tls_client_ca_path, config.tls_cert_path, config.tls_key_path))
        if config.metrics_port >= 0:
            metrics_http = MetricsHttpServer(metrics.registry, config.metrics_port, config.metrics_host)
        server.start()
        grpc_address = format_address(config.host, port)
        metrics_url = metrics_http.url if metrics_http else "off"
        log.info("store serving gRPC on %s, metrics %s", grpc_address, metrics_url)
        print(f"{READY_PREFIX} grpc={grpc_address} metrics={metrics_url} data={config.store_root}", flush=True)
        log.info("received %s, stopping", received.wait())
    except OSError as exc:  # a port that cannot be bound
        log.error("store service failed: %s", exc)
        return 1
    except Exception:
        log.exception("store service failed")
        return 1
    finally:
        if server is not None:
            stop_server(server, STOP_GRACE_S)
            log.info("gRPC server stopped")
        if metrics_http is not None:
            metrics_http.close()
        store.shutdown()
        log.info("store service stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
