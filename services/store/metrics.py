"""Prometheus metrics of the store process.

Three sources, one registry per process (never prometheus-client's global one, so tests and
several stores in one process do not collide):

* ``StoreStatsCollector`` reads ``store.stats()`` at scrape time; the core keeps plain
  counters and knows nothing of Prometheus. Names are RocketMQ 5's where RocketMQ has the
  metric (``BrokerMetricsConstant``), ``pyrmq_store_*`` otherwise.
* ``put_latency``: a histogram the servicer observes around every PutMessages call.
* ``RpcMetricsInterceptor``: a gRPC server interceptor timing every RPC by method and code.

The HTTP endpoint binds to 127.0.0.1 by default: it is unauthenticated and names topics'
and groups' counts (reliability.md §4.6). No label ever carries a topic, key or client address.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.store.clock import Clock, SystemClock
from services.store.model import StoreStats

log = logging.getLogger(__name__)

# 50 µs .. 5 s: a put into the page cache is tens of µs, a SYNC flush on a slow disk seconds.
PUT_LATENCY_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                         0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
RPC_LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                         0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class StatsSource(Protocol):
    def stats(self) -> StoreStats: ...


# (name, kind, help, StoreStats field). Counters are exposed with a "_total" suffix.
STATS_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("rocketmq_storage_size", "gauge", "Bytes used by the store root's files.",
     "storage_size_bytes"),
    ("rocketmq_storage_flush_behind_bytes", "gauge",
     "CommitLog bytes written but not yet flushed to disk.", "flush_behind_bytes"),
    ("rocketmq_storage_dispatch_behind_bytes", "gauge",
     "CommitLog bytes written but not yet dispatched to ConsumeQueues and IndexFiles.",
     "dispatch_behind_bytes"),
    ("rocketmq_topic_number", "gauge", "Topics configured.", "topic_count"),
    ("rocketmq_consumer_group_number", "gauge", "Subscription groups configured.", "group_count"),
    ("pyrmq_store_commitlog_max_offset_bytes", "gauge",
     "The CommitLog offset the next record will get.", "commitlog_max_offset"),
    ("pyrmq_store_put_messages", "counter", "Messages appended since the process started.",
     "put_messages_total"),
    ("pyrmq_store_put_bytes", "counter", "Record bytes appended since the process started.",
     "put_bytes_total"),
)
assert all(field in StoreStats.__dataclass_fields__ for *_, field in STATS_METRICS)


class StoreStatsCollector(Collector):
    """Turns one ``store.stats()`` snapshot into metric families at each scrape."""

    def __init__(self, store: StatsSource, labels: dict[str, str] | None = None) -> None:
        self._store = store
        self._label_names = sorted(labels or {})
        self._label_values = [(labels or {})[name] for name in self._label_names]

    def _families(self, stats: StoreStats | None) -> Iterator[Metric]:
        for name, kind, help_text, field in STATS_METRICS:
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = family_type(name, help_text, labels=self._label_names)
            if stats is not None:
                family.add_metric(self._label_values, getattr(stats, field))
            yield family

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self._store.stats()
        except Exception:  # noqa: BLE001 - a scrape must not fail because the store is closing
            log.warning("store.stats() failed during a scrape", exc_info=True)
            return []
        return list(self._families(stats))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    """Observes ``rocketmq_rpc_latency_seconds{method, code}`` for every RPC.

    ``method`` is the full gRPC path (``/pyrmq.store.v1.Store/PutMessages``): a fixed set. A
    streaming RPC is timed from its start until its last response (or its cancellation).
    """

    def __init__(self, rpc_latency: Histogram, clock: Clock,
                 in_band_code: Callable[[Any], str | None] | None = None) -> None:
        self._rpc_latency = rpc_latency
        self._clock = clock
        # A protocol with in-band errors (apache.rocketmq.v2) names the code a response
        # carries; None: the response carries none, the gRPC code counts.
        self._in_band_code = in_band_code

    def _observe(self, method: str, context: grpc.ServicerContext, started_s: float,
                 failed: BaseException | None, in_band: str | None = None) -> None:
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

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        serializers = dict(request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary_response(method, handler.unary_unary), **serializers)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream_response(method, handler.unary_stream), **serializers)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary_response(method, handler.stream_unary), **serializers)
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream_response(method, handler.stream_stream), **serializers)


class StoreMetrics:
    """Every metric of one store process, in its own registry."""

    def __init__(self, store: StatsSource, labels: dict[str, str] | None = None,
                 clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreStatsCollector(store, labels))
        self.put_latency = Histogram(
            "pyrmq_store_put_latency_seconds", "Time to serve one PutMessages batch.",
            buckets=PUT_LATENCY_BUCKETS_S, registry=self.registry)
        self.rpc_latency = Histogram(
            "rocketmq_rpc_latency_seconds", "Time to serve one gRPC call, by method and code.",
            ["method", "code"], buckets=RPC_LATENCY_BUCKETS_S, registry=self.registry)
        self.interceptor = RpcMetricsInterceptor(self.rpc_latency, clock or SystemClock())


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
