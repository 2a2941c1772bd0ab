"""Prometheus metrics of the broker process (one registry per process, like the store's).

* ``pyrmq_broker_*`` from the core's counters, read at scrape time: store PutMessages calls,
  messages put, coalesced batches, the largest batch, sends waiting, live client sessions;
* ``rocketmq_rpc_latency_seconds{method, code}``: every call (a stream is timed until
  it ends). ``code`` is the v2 in-band ``Code`` name the response carries (``OK``,
  ``TOPIC_NOT_FOUND`` ...; a stream: its last status), else the gRPC code name;
* ``rocketmq_messages_in_total{topic, message_type}`` and
  ``rocketmq_throughput_in_total{topic}``: messages accepted by SendMessage (body
  bytes); ``rocketmq_messages_out_total{topic, consumer_group}`` and
  ``rocketmq_throughput_out_total{topic, consumer_group}``: messages handed out by
  ReceiveMessage (redeliveries count again). Names are RocketMQ 5's (``BrokerMetricsConstant``;
  its throughput counters are in bytes); the RPC histogram adds Prometheus' unit suffix;
* ``pyrmq_priority_messages_in_total{topic, priority}``: PRIORITY messages accepted, by the
  level they were stored at (``min(priority, queues - 1)``: at most one series per queue);
* ``rocketmq_message_size{topic, message_type}``: a histogram of the body size of each message
  SendMessage accepted, on RocketMQ's buckets (1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB);
  body bytes like ``rocketmq_throughput_in_total`` (RocketMQ records the CommitLog record size);
* ``rocketmq_commit_messages_total{topic}`` / ``rocketmq_rollback_messages_total{topic}``:
  transactions this broker resolved by EndTransaction (``topic``: the real topic), counted once
  per transaction id the broker resolves (a repeated resolution is not counted again);
* ``rocketmq_consumer_lag_messages{consumer_group, topic}`` and
  ``rocketmq_consumer_inflight_messages{consumer_group, topic}``: asked of the store
  (GetConsumerStats) at scrape time, since the broker keeps no state; a store that does not
  answer within ``CONSUMER_STATS_TIMEOUT_S`` leaves them out of that scrape. Likewise
  ``rocketmq_consumer_ready_messages{consumer_group, topic}`` (the backlog not yet handed out)
  and ``rocketmq_send_to_dlq_messages_total{consumer_group, topic}`` (the store's count since it
  started of messages moved to ``%DLQ%{group}``: after the last delivery attempt, or by
  ForwardMessageToDeadLetterQueue; ``topic``: the topic consumed), and, in the same call,
  ``rocketmq_half_messages{topic}``: transactions whose half message is neither committed nor
  rolled back (nor discarded by the checker) yet, by real topic, counted once per transaction
  however many copies the checker appended (RocketMQ 5's ``TransactionMetrics``, which the store
  keeps: ``services/store/metadata/transaction_metrics.py``; a topic stays at 0 once all are resolved).
  These are the store's figures: every broker reports the same ones, so dashboards take ``max``,
  never ``sum``, over brokers;
* ``rocketmq_producer_connections{language, version, protocol_type}`` and
  ``rocketmq_consumer_connections{consumer_group, language, version, consume_mode,
  protocol_type, is_system}``: v2 clients with a live Telemetry stream (``protocol_type="grpc"``)
  and remoting clients heartbeating on the remoting port (``protocol_type="remoting"``, one per
  client and group as RocketMQ's broker counts them, ``version`` RocketMQ's name: ``v4_9_4``),
  counted at scrape time (``ConnectionsCollector``; RocketMQ 5's names and labels, values
  lower-cased as there).

Label values are topic and group names as the existing RocketMQ metrics have them, without a cap
(RocketMQ caps series per metric with ``metricsOtelCardinalityLimit``; pyrmq does not yet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from apache.rocketmq.v2 import definition_pb2 as d
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.broker.classic_clients import ClassicClients
from services.broker.client_admin import GRPC, REMOTING, mq_version_name
from services.broker.errors import Code
from services.broker.model import IncomingMessage, SendReceipt
from services.broker.put_coalescer import CoalescerStats
from services.broker.renewal import RenewalStats
from services.domain.delivery import MessageType
from services.domain.names import is_system_group
from services.runtime.clock import Clock, SystemClock
from services.runtime.metrics import RPC_LATENCY_BUCKETS_S, MetricsHttpServer, RpcMetricsInterceptor
from services.store.client.model import ConsumerStats, ConsumerStatsReport

log = logging.getLogger(__name__)

# (name, kind, help, CoalescerStats field)
COALESCER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("pyrmq_broker_store_put_calls", "counter", "PutMessages calls made to the store.", "put_calls"),
    ("pyrmq_broker_store_put_messages", "counter", "Messages put into the store.", "messages"),
    ("pyrmq_broker_store_put_batches", "counter", "Coalesced batches taken from the send queue.", "batches"),
    (
        "pyrmq_broker_store_put_isolated_batches",
        "counter",
        "Batches the store refused as a whole and the broker re-put one by one.",
        "isolated_batches",
    ),
    ("pyrmq_broker_store_put_batch_messages_max", "gauge", "The largest coalesced batch so far.", "batch_messages_max"),
    ("pyrmq_broker_send_queue_messages", "gauge", "Sends waiting for the put dispatcher.", "queued_messages"),
)
assert all(field in CoalescerStats.__dataclass_fields__ for *_, field in COALESCER_METRICS)


class BrokerStatsCollector(Collector):
    def __init__(self, coalescer_stats: Callable[[], CoalescerStats | None], sessions: Callable[[], int]) -> None:
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


# (name, kind, help, RenewalStats field)
RENEWAL_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (
        "pyrmq_broker_renew_tracked_handles",
        "gauge",
        "Push-consumer deliveries whose invisible time the broker renews.",
        "tracked",
    ),
    ("pyrmq_broker_renewals", "counter", "Invisible times of push-consumer deliveries extended.", "renewals"),
    (
        "pyrmq_broker_renew_released",
        "counter",
        "In-flight messages of departed clients made visible again.",
        "released",
    ),
    (
        "pyrmq_broker_renew_max_time_stops",
        "counter",
        "Renewals stopped after renew_max_ms (message nacked).",
        "renew_max_stops",
    ),
    ("pyrmq_broker_renew_dropped", "counter", "Renewals abandoned (handle refused, or store unreachable).", "dropped"),
    (
        "pyrmq_broker_renew_untracked",
        "counter",
        "Push-consumer deliveries not renewed: the table was full.",
        "untracked_full",
    ),
)
assert all(field in RenewalStats.__dataclass_fields__ for *_, field in RENEWAL_METRICS)


class RenewalStatsCollector(Collector):
    def __init__(self, stats: Callable[[], RenewalStats | None]) -> None:
        self._stats = stats

    def _families(self, stats: RenewalStats | None) -> Iterable[Metric]:
        for name, kind, help_text, field in RENEWAL_METRICS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, help_text)
            if stats is not None:
                family.add_metric([], getattr(stats, field))
            yield family

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._stats()))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))


class LiteCollector(Collector):
    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        clients, subscriptions = self._counts()
        consumers = GaugeMetricFamily("pyrmq_lite_consumers", "Lite consumers with lite subscriptions here.")
        consumers.add_metric([], clients)
        subscribed = GaugeMetricFamily(
            "pyrmq_lite_subscriptions", "Lite topics subscribed, summed over lite consumers."
        )
        subscribed.add_metric([], subscriptions)
        return [consumers, subscribed]


_CODE_NAMES = {value.number: value.name for value in d.Code.DESCRIPTOR.values}
_HAS_V2_STATUS: dict[Any, bool] = {}  # response descriptor -> has a v2 ``Status status`` field


def in_band_code(response: Any) -> str | None:
    """The v2 ``Code`` name in a response's ``status`` (None: it has none, e.g. grpc health).
    Runs for every response, streamed ones included: the descriptor check is cached."""
    descriptor = getattr(response, "DESCRIPTOR", None)
    has_status = _HAS_V2_STATUS.get(descriptor)
    if has_status is None:
        field = descriptor.fields_by_name.get("status") if descriptor is not None else None
        has_status = _HAS_V2_STATUS[descriptor] = (  # grpc health's ``status`` is an enum
            field is not None
            and field.message_type is not None
            and field.message_type.full_name == d.Status.DESCRIPTOR.full_name
        )
    if not has_status or not response.HasField("status"):
        return None
    code = response.status.code
    return _CODE_NAMES.get(code) or str(code)


def effective_type(message: IncomingMessage) -> str:
    """The type a message was sent as: what the client said, else what its fields imply."""
    if message.message_type is not MessageType.MESSAGE_TYPE_UNSPECIFIED:
        return message.message_type.name
    if message.message_group is not None:
        return MessageType.FIFO.name
    if message.delivery_timestamp_ms is not None:
        return MessageType.DELAY.name
    if message.priority is not None:
        return MessageType.PRIORITY.name
    return MessageType.LITE.name if message.lite_topic is not None else MessageType.NORMAL.name


# RocketMQ's message size buckets (BrokerMetricsManager): 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB.
MESSAGE_SIZE_BUCKETS_BYTES = (1024.0, 4096.0, 524_288.0, 1_048_576.0, 2_097_152.0, 4_194_304.0)


class TrafficMetrics:
    """Messages and bytes in and out, by topic (``model.TrafficObserver``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._messages_in = Counter(
            "rocketmq_messages_in", "Messages accepted by SendMessage.", ["topic", "message_type"], registry=registry
        )
        self._bytes_in = Counter(
            "rocketmq_throughput_in", "Body bytes accepted by SendMessage.", ["topic"], registry=registry
        )
        self._messages_out = Counter(
            "rocketmq_messages_out",
            "Messages handed out by ReceiveMessage.",
            ["topic", "consumer_group"],
            registry=registry,
        )
        self._bytes_out = Counter(
            "rocketmq_throughput_out",
            "Body bytes handed out by ReceiveMessage.",
            ["topic", "consumer_group"],
            registry=registry,
        )
        self._priority_in = Counter(
            "pyrmq_priority_messages_in",
            "PRIORITY messages accepted by SendMessage, by the priority level (queue) they were stored at.",
            ["topic", "priority"],
            registry=registry,
        )
        self._message_size = Histogram(
            "rocketmq_message_size",
            "Body bytes of each message accepted by SendMessage.",
            ["topic", "message_type"],
            buckets=MESSAGE_SIZE_BUCKETS_BYTES,
            registry=registry,
        )

    def messages_in(self, messages: Sequence[IncomingMessage], receipts: Sequence[SendReceipt]) -> None:
        sizes: dict[tuple[str, str], list[int]] = {}  # one label lookup per (topic, type) per call
        for message, receipt in zip(messages, receipts):
            if receipt.code == Code.OK:
                message_type = effective_type(message)
                sizes.setdefault((message.topic, message_type), []).append(len(message.body))
                if message_type == "PRIORITY" and receipt.queue_id >= 0:
                    self._priority_in.labels(message.topic, str(receipt.queue_id)).inc()
        for (topic, message_type), each in sizes.items():
            self._messages_in.labels(topic, message_type).inc(len(each))
            self._bytes_in.labels(topic).inc(sum(each))
            histogram = self._message_size.labels(topic, message_type)
            for size in each:
                histogram.observe(size)

    def messages_out(self, group: str, deliveries: Sequence[Any]) -> None:
        counts: dict[str, list[int]] = {}
        for delivery in deliveries:
            tally = counts.setdefault(delivery.topic, [0, 0])
            tally[0] += 1
            tally[1] += len(delivery.body)
        for topic, (count, size) in counts.items():
            self._messages_out.labels(topic, group).inc(count)
            self._bytes_out.labels(topic, group).inc(size)


class TransactionMetrics:
    """Transactions resolved by EndTransaction, by real topic (``transaction.TransactionObserver``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._commits = Counter(
            "rocketmq_commit_messages", "Transactions committed by EndTransaction.", ["topic"], registry=registry
        )
        self._rollbacks = Counter(
            "rocketmq_rollback_messages", "Transactions rolled back by EndTransaction.", ["topic"], registry=registry
        )

    def resolved(self, topic: str, commit: bool) -> None:
        (self._commits if commit else self._rollbacks).labels(topic).inc()


CONSUMER_STATS_TIMEOUT_S = 2.0
ConsumerStatsSource = Callable[[float], ConsumerStatsReport]

# (name, kind, help, ConsumerStats field), each labelled consumer_group and topic.
CONSUMER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (
        "rocketmq_consumer_lag_messages",
        "gauge",
        "Messages a consumer group has not acknowledged yet (in-flight included).",
        "lag_messages",
    ),
    (
        "rocketmq_consumer_inflight_messages",
        "gauge",
        "Messages received by a consumer group and not yet acknowledged.",
        "inflight_messages",
    ),
    (
        "rocketmq_consumer_ready_messages",
        "gauge",
        "Messages ready for a consumer group and not yet handed out.",
        "ready_messages",
    ),
    (
        "rocketmq_send_to_dlq_messages",
        "counter",
        "Messages moved to the group's DLQ since the store started (the store's count).",
        "dlq_messages",
    ),
)
assert all(field in ConsumerStats.__dataclass_fields__ for *_, field in CONSUMER_METRICS)


class ConsumerStatsCollector(Collector):
    """Consumer lag, in-flight, ready and dead-lettered messages by group and topic, and half
    messages (open transactions) by real topic, read from the store per scrape."""

    def __init__(self, source: ConsumerStatsSource) -> None:
        self._source = source

    def _families(self, report: ConsumerStatsReport) -> list[Metric]:
        families: list[Metric] = []
        for name, kind, help_text, field in CONSUMER_METRICS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                name, help_text, labels=["consumer_group", "topic"]
            )
            for row in report.consumers:
                family.add_metric([row.group, row.topic], getattr(row, field))
            families.append(family)
        half = GaugeMetricFamily(
            "rocketmq_half_messages",
            "Transactions whose half message is not committed or rolled back yet, by real topic.",
            labels=["topic"],
        )
        for topic, count in sorted(report.half_messages.items()):
            half.add_metric([topic], count)
        families.append(half)
        return families

    def collect(self) -> Iterable[Metric]:
        try:
            report = self._source(CONSUMER_STATS_TIMEOUT_S)
        except Exception:  # a scrape must not fail because the store is away
            log.warning("consumer stats unavailable from the store for this scrape", exc_info=True)
            return []
        return self._families(report)

    def describe(self) -> Iterable[Metric]:
        return self._families(ConsumerStatsReport([], {}))


CONSUME_MODES = {"PUSH_CONSUMER": "push", "LITE_PUSH_CONSUMER": "push"}  # others "pull": ConsumeType's name
# A remoting consumer's ConsumeType -> its consume_mode (ConsumeType.getTypeCN, lower-cased).
CLASSIC_CONSUME_MODES = {"CONSUME_ACTIVELY": "pull", "CONSUME_PASSIVELY": "push", "CONSUME_POP": "pop"}


class ConnectionsCollector(Collector):
    """Producer and consumer connections by language and version (BrokerMetricsManager's
    connection gauges). v2 clients (``protocol_type`` grpc): ``version`` is the client's own
    (5.1.2). Remoting clients (``protocol_type`` remoting, as RocketMQ's broker labels them):
    one per producer group and per consumer group a client heartbeats, ``version``
    ``MQVersion.getVersionDesc`` lower-cased (v4_9_4), ``consume_mode`` pull, push or pop."""

    def __init__(self, sessions: Callable[[], Sequence[Any]], classic: ClassicClients | None = None) -> None:
        self._sessions = sessions  # telemetry.ClientSession: client_type, group, language, version
        self._classic = classic  # the remoting door's clients; None: no remoting door

    def _families(self, sessions: Sequence[Any], classic: ClassicClients | None) -> list[Metric]:
        producers: dict[tuple[str, ...], int] = {}
        consumers: dict[tuple[str, ...], int] = {}

        def count_consumer(group: str, language: str, version: str, mode: str, protocol: str) -> None:
            key = (group, language, version, mode, protocol, str(is_system_group(group)).lower())
            consumers[key] = consumers.get(key, 0) + 1

        for session in sessions:
            language, version = (session.language or "unknown").lower(), (session.version or "unknown").lower()
            kind = session.client_type.name
            if kind == "PRODUCER":
                key: tuple[str, ...] = (language, version, GRPC)
                producers[key] = producers.get(key, 0) + 1
            elif kind != "CLIENT_TYPE_UNSPECIFIED":
                count_consumer(session.group or "", language, version, CONSUME_MODES.get(kind, "pull"), GRPC)
        if classic is not None:
            for classic_producer in classic.producers():
                language, version = classic_producer.language, mq_version_name(classic_producer.version)
                key = ((language or "unknown").lower(), version.lower(), REMOTING)
                producers[key] = producers.get(key, 0) + 1
            for classic_consumer in classic.all_consumers():
                language, version = classic_consumer.language, mq_version_name(classic_consumer.version)
                mode = CLASSIC_CONSUME_MODES.get(classic_consumer.consume_type, "push")
                count_consumer(classic_consumer.group, (language or "unknown").lower(), version.lower(), mode, REMOTING)
        producer = GaugeMetricFamily(
            "rocketmq_producer_connections",
            "Producers connected to this broker.",
            labels=["language", "version", "protocol_type"],
        )
        consumer = GaugeMetricFamily(
            "rocketmq_consumer_connections",
            "Consumers connected to this broker.",
            labels=["consumer_group", "language", "version", "consume_mode", "protocol_type", "is_system"],
        )
        for labels, count in sorted(producers.items()):
            producer.add_metric(list(labels), count)
        for labels, count in sorted(consumers.items()):
            consumer.add_metric(list(labels), count)
        return [producer, consumer]

    def collect(self) -> Iterable[Metric]:
        return self._families(self._sessions(), self._classic)

    def describe(self) -> Iterable[Metric]:
        return self._families((), None)


class BrokerMetrics:
    def __init__(self, clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.rpc_latency = Histogram(
            "rocketmq_rpc_latency_seconds",
            "Time to serve one call, by method and (in-band) code.",
            ["method", "code"],
            buckets=RPC_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.interceptor = RpcMetricsInterceptor(self.rpc_latency, clock or SystemClock(), in_band_code)
        self.traffic = TrafficMetrics(self.registry)
        self.transactions = TransactionMetrics(self.registry)

    def watch(
        self,
        coalescer_stats: Callable[[], CoalescerStats | None],
        sessions: Callable[[], int],
        consumer_stats: ConsumerStatsSource | None = None,
    ) -> None:
        self.registry.register(BrokerStatsCollector(coalescer_stats, sessions))
        if consumer_stats is not None:
            self.registry.register(ConsumerStatsCollector(consumer_stats))

    def watch_connections(self, sessions: Callable[[], Sequence[Any]], classic: ClassicClients | None = None) -> None:
        """The connection gauges over the v2 sessions and the remoting door's clients."""
        self.registry.register(ConnectionsCollector(sessions, classic))

    def watch_renewals(self, stats: Callable[[], RenewalStats | None]) -> None:
        self.registry.register(RenewalStatsCollector(stats))

    def watch_lite(self, counts: Callable[[], tuple[int, int]]) -> None:
        """(lite consumers, their lite subscriptions): two gauges, no series per lite topic."""
        self.registry.register(LiteCollector(counts))


__all__ = ["BrokerMetrics", "MetricsHttpServer"]
