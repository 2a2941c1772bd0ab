"""Prometheus metrics of the broker process (one registry per process, like the store's).

* ``pyrmq_broker_*`` from the core's counters, read at scrape time: store PutMessages calls,
  messages put, coalesced batches, the largest batch, sends waiting, live client sessions;
* ``pyrmq_broker_rpc_latency_seconds{method, code}``: every MessagingService call (a
  Telemetry stream is timed until it ends). ``code`` is the gRPC code, which is OK for
  in-band v2 errors.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.broker.clock import Clock, SystemClock
from services.broker.store_client import CoalescerStats
from services.store.metrics import RPC_LATENCY_BUCKETS_S, MetricsHttpServer, RpcMetricsInterceptor

log = logging.getLogger(__name__)

# (name, kind, help, CoalescerStats field)
COALESCER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("pyrmq_broker_store_put_calls", "counter", "PutMessages calls made to the store.", "put_calls"),
    ("pyrmq_broker_store_put_messages", "counter", "Messages put into the store.", "messages"),
    ("pyrmq_broker_store_put_batches", "counter", "Coalesced batches taken from the send queue.", "batches"),
    ("pyrmq_broker_store_put_isolated_batches", "counter",
     "Batches the store refused as a whole and the broker re-put one by one.", "isolated_batches"),
    ("pyrmq_broker_store_put_batch_messages_max", "gauge", "The largest coalesced batch so far.",
     "batch_messages_max"),
    ("pyrmq_broker_send_queue_messages", "gauge", "Sends waiting for the put dispatcher.", "queued_messages"),
)
assert all(field in CoalescerStats.__dataclass_fields__ for *_, field in COALESCER_METRICS)


class BrokerStatsCollector(Collector):
    def __init__(self, coalescer_stats: Callable[[], CoalescerStats | None],
                 sessions: Callable[[], int]) -> None:
        self._coalescer_stats = coalescer_stats
        self._sessions = sessions

    def _families(self, stats: CoalescerStats | None, sessions: int | None) -> Iterable[Metric]:
        for name, kind, help_text, field in COALESCER_METRICS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, help_text)
            if stats is not None:
                family.add_metric([], getattr(stats, field))
            yield family
        family = GaugeMetricFamily("pyrmq_broker_client_sessions", "Clients with a live Telemetry stream.")
        if sessions is not None:
            family.add_metric([], sessions)
        yield family

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._coalescer_stats(), self._sessions()))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None, None))


class BrokerMetrics:
    def __init__(self, clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.rpc_latency = Histogram(
            "pyrmq_broker_rpc_latency_seconds", "Time to serve one MessagingService call, by method and code.",
            ["method", "code"], buckets=RPC_LATENCY_BUCKETS_S, registry=self.registry)
        self.interceptor = RpcMetricsInterceptor(self.rpc_latency, clock or SystemClock())

    def watch(self, coalescer_stats: Callable[[], CoalescerStats | None], sessions: Callable[[], int]) -> None:
        self.registry.register(BrokerStatsCollector(coalescer_stats, sessions))


__all__ = ["BrokerMetrics", "MetricsHttpServer"]
