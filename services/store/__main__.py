"""``python -m services.store``: command line -> StoreConfig -> FileStore -> gRPC server.

Prints exactly one line on stdout, once the store has recovered and both the gRPC and the
metrics endpoints accept connections (ports are the bound ones, so ``--port 0`` works)::

    pyrmq-store ready grpc=127.0.0.1:10911 metrics=http://127.0.0.1:9101/metrics data=DIR/store

Everything else goes to the log (stderr). SIGTERM or SIGINT stops the server (in-flight calls
get a grace period), shuts the store down cleanly, and exits 0.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from services.process import StopSignals, configure_logging, format_address
from services.store.checkpoint import StoreLockedError
from services.store.config import FlushMode, StoreConfig
from services.store.metrics import MetricsHttpServer, StoreMetrics
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore

log = logging.getLogger("services.store")

READY_PREFIX = "pyrmq-store ready"
STOP_GRACE_S = 5.0
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.store", description="Run the pyrmq store service.")
    parser.add_argument("--data-dir", type=Path, required=True,
                        help="data directory; the store root is DATA_DIR/store")
    parser.add_argument("--host", default="127.0.0.1", help="gRPC listen address (default %(default)s)")
    parser.add_argument("--port", type=int, default=10911, help="gRPC port, 0 for any free one (default %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9101,
                        help="Prometheus /metrics port on 127.0.0.1, 0 for any free one, -1 to disable "
                             "(default %(default)s)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="Prometheus /metrics listen address (default %(default)s: loopback only, the endpoint is unauthenticated)")
    parser.add_argument("--lock-wait-ms", type=int, default=10_000,
                        help="how long to wait for a store process that still holds the data directory's lock "
                             "(one killed a moment ago) before giving up (default %(default)s)")
    parser.add_argument("--flush-mode", choices=[m.name for m in FlushMode], default=FlushMode.ASYNC.name,
                        help="ASYNC: flush every interval; SYNC: a put returns after fdatasync (default %(default)s)")
    parser.add_argument("--commitlog-file-size-bytes", type=int, default=None,
                        help="CommitLog segment size (default 1 GiB)")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> StoreConfig:
    advertised_host = "127.0.0.1" if args.host in WILDCARD_HOSTS else args.host
    optional = {}
    if args.commitlog_file_size_bytes is not None:
        optional["commitlog_file_size_bytes"] = args.commitlog_file_size_bytes
    return StoreConfig(
        store_root=args.data_dir.resolve() / "store", flush_mode=FlushMode[args.flush_mode],
        store_host=format_address(advertised_host, args.port),
        **optional)


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
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()

    store = FileStore(config)
    log.info("starting store at %s (flush %s)", config.store_root, config.flush_mode.name)
    try:
        start_when_unlocked(store, args.lock_wait_ms / 1000, received)
    except Exception:
        log.exception("store failed to start")
        store.shutdown()
        return 1
    metrics = StoreMetrics(store, labels={"cluster": config.cluster_name, "node_id": config.broker_name,
                                          "node_type": "store"})
    metrics_http: MetricsHttpServer | None = None
    server = None
    try:
        server, port = build_server(store, args.host, args.port, metrics=metrics)
        if args.metrics_port >= 0:
            metrics_http = MetricsHttpServer(metrics.registry, args.metrics_port, args.metrics_host)
        server.start()
        grpc_address = format_address(args.host, port)
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
