"""Prometheus metrics of the store process.

Three sources, one registry per process (never prometheus-client's global one, so tests and
several stores in one process do not collide):

* ``StoreStatsCollector`` reads ``store.stats()`` at scrape time; the core keeps plain
  counters and knows nothing of Prometheus. Names are RocketMQ 5's where RocketMQ has the
  metric (``BrokerMetricsConstant``), ``pyrmq_store_*`` otherwise.
* ``ReplicationCollector`` reads the replica's ``replication_stats`` (services/store/ha/
  replica_status.py) the same way: role, epochs, SyncStateSet size, each replica's lag as the
  master sees it (bytes and seconds, label ``replica_id``; the master's own row is 0, so a group
  of one has the series too), elections won and their duration, and the puts replication
  refused (HA_NOT_AVAILABLE) or did not confirm in time (SLAVE_PERSISTENCE_TIMEOUT). RocketMQ
  has no broker-side HA metrics; its controller's ``rocketmq_election_total`` counts elections
  the controller ran, where each pyrmq replica counts those it won.
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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from services.runtime.clock import Clock, SystemClock
from services.runtime.metrics import RPC_LATENCY_BUCKETS_S, RpcMetricsInterceptor
from services.store.ha.replica_status import CANDIDATE, MASTER, SLAVE, Replicated, ReplicationStats, replication_stats
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
        "pyrmq_lite_topics",
        "gauge",
        "Lite topics holding messages (LMQs of LITE topics), every parent together.",
        "lite_topic_count",
    ),
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
        except Exception:  # a scrape must not fail because the store is closing
            log.warning("store.stats() failed during a scrape", exc_info=True)
            return []
        return list(self._families(stats))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))


class ReplicationCollector(Collector):
    """The replica's role, epochs, lag and elections at each scrape (module docstring)."""

    def __init__(self, replication: Replicated, labels: dict[str, str] | None = None) -> None:
        self._replication = replication
        self._names = sorted(labels or {})
        self._values = [(labels or {})[name] for name in self._names]

    def _families(self, stats: ReplicationStats | None) -> Iterator[Metric]:
        names, values = self._names, self._values
        role = GaugeMetricFamily(
            "pyrmq_store_replica_role",
            "1 for this replica's role (MASTER, SLAVE, CANDIDATE: electing).",
            labels=[*names, "role"],
        )
        gauges = [
            ("pyrmq_store_replica_epoch", "The last epoch this replica's log holds.", "epoch"),
            ("pyrmq_store_master_epoch", "The group's masterEpoch as this replica knows it (0: none).", "master_epoch"),
            (
                "pyrmq_store_sync_state_set_size",
                "Replicas in the group's SyncStateSet, the master included.",
                "sync_state_set_size",
            ),
            (
                "pyrmq_store_last_election_duration_seconds",
                "The last election this replica won: master lost to writable.",
                "last_election_seconds",
            ),
        ]
        counters = [
            (
                "pyrmq_store_elections_won",
                "Elections that made this replica master (planned switches included).",
                "elections_won_total",
            ),
            ("pyrmq_store_master_switches", "Planned switches this replica handed over as master.", "switches_total"),
            (
                "pyrmq_store_ha_not_available",
                "Puts refused with HA_NOT_AVAILABLE: fewer in-sync replicas than min_in_sync_replicas.",
                "ha_not_available_total",
            ),
            (
                "pyrmq_store_slave_persistence_timeout",
                "Puts answered SLAVE_PERSISTENCE_TIMEOUT: slaves did not confirm in time.",
                "slave_timeout_total",
            ),
        ]
        lag_bytes = GaugeMetricFamily(
            "pyrmq_store_replication_lag_bytes",
            "On the master: its max phy_offset minus each replica's confirmed offset.",
            labels=[*names, "replica_id"],
        )
        lag_seconds = GaugeMetricFamily(
            "pyrmq_store_replication_lag_seconds",
            "On the master: how old each replica's oldest unconfirmed byte is (-1: unknown).",
            labels=[*names, "replica_id"],
        )
        duration = SummaryMetricFamily(
            "pyrmq_store_election_duration_seconds",
            "Elections won: from the master lost to this replica writable.",
            labels=names,
        )
        families: list[tuple[GaugeMetricFamily | CounterMetricFamily, str]] = [
            (GaugeMetricFamily(n, h, labels=names), f) for n, h, f in gauges
        ]
        families += [(CounterMetricFamily(n, h, labels=names), f) for n, h, f in counters]
        if stats is not None:
            for each in (MASTER, SLAVE, CANDIDATE):
                role.add_metric([*values, each], 1.0 if stats.role == each else 0.0)
            for family, field in families:
                family.add_metric(values, getattr(stats, field))
            for replica_id, lag, age in stats.lags:
                lag_bytes.add_metric([*values, str(replica_id)], lag)
                lag_seconds.add_metric([*values, str(replica_id)], age)
            duration.add_metric(values, count_value=stats.elections_timed_total, sum_value=stats.election_seconds_sum)
        yield role
        yield from (family for family, _ in families)
        yield lag_bytes
        yield lag_seconds
        yield duration

    def collect(self) -> Iterable[Metric]:
        try:
            stats = replication_stats(self._replication)
        except Exception:  # a scrape must not fail because the store is closing
            log.warning("replication stats failed during a scrape", exc_info=True)
            return []
        return list(self._families(stats))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))


class StoreMetrics:
    """Every metric of one store process, in its own registry (``replication``: the started
    store's role, for the replication metrics)."""

    def __init__(
        self,
        store: StatsSource,
        labels: dict[str, str] | None = None,
        clock: Clock | None = None,
        replication: Replicated | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreStatsCollector(store, labels))
        if replication is not None:
            self.registry.register(ReplicationCollector(replication, labels))
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
