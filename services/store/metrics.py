"""Prometheus metrics of the store process.

Three sources, one registry per process (never prometheus-client's global one, so tests and
several stores in one process do not collide):

* ``StoreStatsCollector`` reads ``store.stats()`` at scrape time; the core keeps plain
  counters and knows nothing of Prometheus. Names are RocketMQ 5's where RocketMQ has the
  metric (``BrokerMetricsConstant``), ``pyrmq_store_*`` otherwise.
* ``put_latency``: a histogram the servicer observes around every PutMessages call.
* ``RpcMetricsInterceptor``: a gRPC server interceptor timing every RPC by method and code.

The HTTP endpoint binds to 127.0.0.1 by default: it is unauthenticated and names topics'
and groups' counts (RocketMQ binds its exporter to the broker's public address, which discloses
them to anyone). No label ever carries a topic, key or client address.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.runtime.clock import Clock, SystemClock
from services.runtime.metrics import RPC_LATENCY_BUCKETS_S, RpcMetricsInterceptor
from services.store.model import StoreStats

log = logging.getLogger(__name__)

# 50 µs .. 5 s: a put into the page cache is tens of µs, a SYNC flush on a slow disk seconds.
PUT_LATENCY_BUCKETS_S = (
    0.00005,
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
)


class StatsSource(Protocol):
    def stats(self) -> StoreStats: ...


# (name, kind, help, StoreStats field). Counters are exposed with a "_total" suffix.
STATS_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("rocketmq_storage_size", "gauge", "Bytes used by the store root's files.", "storage_size_bytes"),
    (
        "rocketmq_storage_flush_behind_bytes",
        "gauge",
        "CommitLog bytes written but not yet flushed to disk.",
        "flush_behind_bytes",
    ),
    (
        "rocketmq_storage_dispatch_behind_bytes",
        "gauge",
        "CommitLog bytes written but not yet dispatched to ConsumeQueues and IndexFiles.",
        "dispatch_behind_bytes",
    ),
    ("rocketmq_topic_number", "gauge", "Topics configured.", "topic_count"),
    ("rocketmq_consumer_group_number", "gauge", "Subscription groups configured.", "group_count"),
    (
        "pyrmq_store_commitlog_max_offset_bytes",
        "gauge",
        "The CommitLog offset the next record will get.",
        "commitlog_max_offset",
    ),
    ("pyrmq_store_put_messages", "counter", "Messages appended since the process started.", "put_messages_total"),
    ("pyrmq_store_put_bytes", "counter", "Record bytes appended since the process started.", "put_bytes_total"),
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


class StoreMetrics:
    """Every metric of one store process, in its own registry."""

    def __init__(self, store: StatsSource, labels: dict[str, str] | None = None, clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreStatsCollector(store, labels))
        self.put_latency = Histogram(
            "pyrmq_store_put_latency_seconds",
            "Time to serve one PutMessages batch.",
            buckets=PUT_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "rocketmq_rpc_latency_seconds",
            "Time to serve one gRPC call, by method and code.",
            ["method", "code"],
            buckets=RPC_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.interceptor = RpcMetricsInterceptor(self.rpc_latency, clock or SystemClock())
