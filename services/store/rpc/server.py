"""Build the store's gRPC server: the Store service, grpc health and server reflection.

``build_server`` returns the server *not started* plus the port actually bound (pass port 0
to get a free one, as the tests do). Stop it with ``stop_server``, which first reports
NOT_SERVING and ends the WatchArrivals streams, so a graceful stop does not sit out its whole
grace period waiting for streams that never end by themselves.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pyrmq.store.v1 import store_pb2, store_pb2_grpc

from services.runtime.process import format_address
from services.runtime.rpc.decode_guard import DecodeGuardInterceptor
from services.runtime.rpc.tls import TlsFiles, add_port
from services.store.metrics import StoreMetrics
from services.store.rpc.servicer import WATCHERS_MAX, StoreCore, StoreServicer

log = logging.getLogger(__name__)

SERVICE_NAME = store_pb2.DESCRIPTOR.services_by_name["Store"].full_name  # pyrmq.store.v1.Store
# A PutMessages batch may carry a 4 MiB body per message; leave room for a batch of them.
MESSAGE_SIZE_MAX_BYTES = 64 << 20
MAX_WORKERS_DEFAULT = 32
assert MAX_WORKERS_DEFAULT > WATCHERS_MAX, "watch streams must leave workers for unary calls"

# server -> what to do before server.stop(): the returned grpc.Server has no room for it.
_BEFORE_STOP: weakref.WeakKeyDictionary[grpc.Server, Callable[[], None]] = weakref.WeakKeyDictionary()


def build_server(
    store: StoreCore,
    host: str = "127.0.0.1",
    port: int = 0,
    max_workers: int = MAX_WORKERS_DEFAULT,
    metrics: StoreMetrics | None = None,
    tls: TlsFiles | None = None,
) -> tuple[grpc.Server, int]:
    """A server for ``store`` bound to ``host:port`` (not started) and the port it bound."""
    watchers_max = min(WATCHERS_MAX, max(1, max_workers // 2))
    servicer = StoreServicer(store, put_latency=metrics.put_latency if metrics else None, watchers_max=watchers_max)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="store-rpc"),
        interceptors=[*([metrics.interceptor] if metrics else []), DecodeGuardInterceptor()],
        options=[
            ("grpc.max_receive_message_length", MESSAGE_SIZE_MAX_BYTES),
            ("grpc.max_send_message_length", MESSAGE_SIZE_MAX_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    store_pb2_grpc.add_StoreServicer_to_server(servicer, server)

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)

    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    try:
        bound_port = add_port(server, format_address(host, port), tls)
    except RuntimeError:  # grpc's "Failed to bind": in use, or not a local address
        bound_port = 0
    if bound_port == 0:
        raise OSError(f"cannot bind the store's gRPC port at {format_address(host, port)} (in use?)")

    def before_stop() -> None:
        health_servicer.enter_graceful_shutdown()  # every service NOT_SERVING from now on
        servicer.close()

    _BEFORE_STOP[server] = before_stop
    log.info("store gRPC server bound to %s", format_address(host, bound_port))
    return server, bound_port


def stop_server(server: grpc.Server, grace_s: float = 5.0) -> None:
    """Report NOT_SERVING, end watch streams, then stop, letting unary calls finish in grace_s."""
    before_stop = _BEFORE_STOP.pop(server, None)
    if before_stop is not None:
        before_stop()
    server.stop(grace_s).wait()
