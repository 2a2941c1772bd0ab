"""Prometheus plumbing every service shares: the ``/metrics`` HTTP endpoint of one registry and
the gRPC server interceptor that times every RPC (``rocketmq_rpc_latency_seconds{method, code}``).

Each service keeps its own registry (never prometheus-client's global one, so tests and several
services in one process do not collide) and its own metric families; only this plumbing is shared.
The HTTP endpoint binds to 127.0.0.1 by default: it is unauthenticated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Histogram, start_http_server

from services.runtime.clock import Clock

RPC_LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    """Observes ``rocketmq_rpc_latency_seconds{method, code}`` for every RPC.

    ``method`` is the full gRPC path (``/pyrmq.store.v1.Store/PutMessages``): a fixed set. A
    streaming RPC is timed from its start until its last response (or its cancellation).
    """

    def __init__(
        self, rpc_latency: Histogram, clock: Clock, in_band_code: Callable[[Any], str | None] | None = None
    ) -> None:
        self._rpc_latency = rpc_latency
        self._clock = clock
        # A protocol with in-band errors (apache.rocketmq.v2) names the code a response
        # carries; None: the response carries none, the gRPC code counts.
        self._in_band_code = in_band_code

    def _observe(
        self,
        method: str,
        context: grpc.ServicerContext,
        started_s: float,
        failed: BaseException | None,
        in_band: str | None = None,
    ) -> None:
        code = context.code()  # set by context.abort / set_code; None means OK
        if code is None:
            if isinstance(failed, GeneratorExit):
                code = grpc.StatusCode.CANCELLED
            else:
                code = grpc.StatusCode.UNKNOWN if failed is not None else grpc.StatusCode.OK
        label = in_band if in_band is not None and code is grpc.StatusCode.OK else code.name
        self._rpc_latency.labels(method, label).observe(self._clock.monotonic_s() - started_s)

    def _wrap_unary_response(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        in_band_code = self._in_band_code

        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            started_s = self._clock.monotonic_s()
            failed: BaseException | None = None
            in_band: str | None = None
            try:
                response = behavior(request, context)
                if in_band_code is not None:
                    in_band = in_band_code(response)
                return response
            except BaseException as exc:
                failed = exc
                raise
            finally:
                self._observe(method, context, started_s, failed, in_band)

        return wrapped

    def _wrap_stream_response(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        in_band_code = self._in_band_code

        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started_s = self._clock.monotonic_s()
            failed: BaseException | None = None
            in_band: str | None = None  # the last code a response of the stream carried
            try:
                for response in behavior(request, context):
                    if in_band_code is not None:
                        in_band = in_band_code(response) or in_band
                    yield response
            except BaseException as exc:
                failed = exc
                raise
            finally:
                self._observe(method, context, started_s, failed, in_band)

        return wrapped

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        serializers = dict(
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary_response(method, handler.unary_unary), **serializers
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream_response(method, handler.unary_stream), **serializers
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary_response(method, handler.stream_unary), **serializers
            )
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream_response(method, handler.stream_stream), **serializers
        )


class MetricsHttpServer:
    """``/metrics`` over HTTP for one registry (prometheus-client's WSGI server thread)."""

    def __init__(self, registry: CollectorRegistry, port: int, addr: str = "127.0.0.1") -> None:
        self._server: WSGIServer
        self._thread: threading.Thread
        self._server, self._thread = start_http_server(port, addr, registry=registry)
        self.port: int = self._server.server_port
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
