"""Prometheus metrics of the transaction checker (its own registry, read at scrape time from
``HalfMessageChecker.stats()``; the core knows nothing of Prometheus).

| metric | kind | what |
|---|---|---|
| ``pyrmq_txcheck_checks_sent_total`` | counter | checks a producer received (RecoverOrphanedTransactionCommand) |
| ``pyrmq_txcheck_check_results_total{resolution}`` | counter | what became of a sent check by the next pass: ``commit`` / ``rollback`` (an op record resolved it; commit if the real topic holds the committed record) or ``unknown`` (still open: asked again or moved) |
| ``pyrmq_txcheck_check_retries_total{reason}`` | counter | checks that reached no producer (``no_producer``) or no broker (``broker_unreachable``): asked again next pass, not counted against the maximum |
| ``pyrmq_txcheck_moved_to_max_time_topic_total`` | counter | half messages moved to TRANS_CHECK_MAX_TIME_TOPIC (checked ``check_max`` times, or past retention) |
| ``pyrmq_txcheck_immunity_pushbacks_total`` | counter | half messages re-appended while immune (CHECK_IMMUNITY_TIME_IN_SECONDS) |
| ``pyrmq_txcheck_resolved_total`` | counter | half records passed because an op record lists them |
| ``pyrmq_txcheck_passes_total``, ``pyrmq_txcheck_pass_failures_total`` | counter | passes done / failed (store unreachable) |
| ``pyrmq_txcheck_half_lag`` / ``pyrmq_txcheck_op_lag`` | gauge | half / op records not yet passed (queue max offset - committed offset) |
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.runtime.metrics import MetricsHttpServer
from services.txcheck.model import TxCheckStats

log = logging.getLogger(__name__)

__all__ = ["MetricsHttpServer", "TxCheckMetrics"]

# (name, kind, help, TxCheckStats field or property). Counters get "_total" from prometheus-client.
STATS_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("pyrmq_txcheck_checks_sent", "counter", "Transaction checks a producer received.", "checks_sent"),
    (
        "pyrmq_txcheck_moved_to_max_time_topic",
        "counter",
        "Half messages moved to TRANS_CHECK_MAX_TIME_TOPIC (kept, never delivered).",
        "moved_to_max_time_topic",
    ),
    (
        "pyrmq_txcheck_immunity_pushbacks",
        "counter",
        "Immune half messages re-appended to the half queue.",
        "immunity_pushbacks",
    ),
    ("pyrmq_txcheck_resolved", "counter", "Half records passed because an op record lists them.", "resolved"),
    ("pyrmq_txcheck_passes", "counter", "Check passes done.", "passes"),
    ("pyrmq_txcheck_pass_failures", "counter", "Check passes the store failed.", "pass_failures"),
    ("pyrmq_txcheck_half_lag", "gauge", "Half records not passed yet (max offset - committed offset).", "half_lag"),
    ("pyrmq_txcheck_op_lag", "gauge", "Op records not consumed yet (max offset - committed offset).", "op_lag"),
)
assert all(hasattr(TxCheckStats, field) or field in TxCheckStats.__dataclass_fields__ for *_, field in STATS_METRICS)
RETRY_REASONS = (("no_producer", "no_producer_retries"), ("broker_unreachable", "broker_unreachable_retries"))


class TxCheckCollector(Collector):
    def __init__(self, stats: Callable[[], TxCheckStats]) -> None:
        self._stats = stats

    def _families(self, stats: TxCheckStats | None) -> Iterator[Metric]:
        for name, kind, help_text, field in STATS_METRICS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, help_text)
            if stats is not None:
                family.add_metric([], getattr(stats, field))
            yield family
        results = CounterMetricFamily(
            "pyrmq_txcheck_check_results", "What became of sent checks, by resolution.", labels=["resolution"]
        )
        retries = CounterMetricFamily(
            "pyrmq_txcheck_check_retries",
            "Checks that reached no producer or no broker: asked again later.",
            labels=["reason"],
        )
        if stats is not None:
            for resolution, count in stats.results:
                results.add_metric([resolution], count)
            for reason, field in RETRY_REASONS:
                retries.add_metric([reason], getattr(stats, field))
        yield results
        yield retries

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self._stats()
        except Exception:  # a scrape must not fail
            log.warning("txcheck stats() failed during a scrape", exc_info=True)
            return []
        return list(self._families(stats))

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))


class TxCheckMetrics:
    """Every metric of one txcheck process, in its own registry."""

    def __init__(self, stats: Callable[[], TxCheckStats]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(TxCheckCollector(stats))
