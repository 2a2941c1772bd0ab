"""Prometheus metrics of the scheduler process (own registry; read from ``stats()`` at scrape).

| metric | kind | meaning |
|---|---|---|
| ``pyrmq_scheduler_timer_enqueued_total`` | counter | rmq_sys_wheel_timer messages written to the TimerLog (recall markers included) |
| ``pyrmq_scheduler_timer_delivered_total`` | counter | timer messages put into their real topic |
| ``pyrmq_scheduler_timer_rolled_total`` | counter | far-future timers re-put into rmq_sys_wheel_timer (ROLL) |
| ``pyrmq_scheduler_timer_recall_markers_total`` | counter | recall (DELETE) markers enqueued |
| ``pyrmq_scheduler_timer_recalled_total`` | counter | timers skipped because a recall named them |
| ``pyrmq_scheduler_timer_dropped_total`` | counter | timers that could not be delivered (missing record, bad properties, refused) |
| ``pyrmq_scheduler_timer_duplicates_total`` | counter | timers delivered again after a crash although their first put may have landed |
| ``pyrmq_scheduler_timer_pending`` | gauge | timers not yet delivered (approximate) |
| ``pyrmq_scheduler_timer_enqueue_lag`` | gauge | rmq_sys_wheel_timer messages not yet enqueued |
| ``pyrmq_scheduler_timer_active_units`` | gauge | units held in memory for the slots being delivered |
| ``pyrmq_scheduler_timer_read_time_ms`` | gauge | the wheel's read pointer (every earlier slot is delivered) |
| ``pyrmq_scheduler_timer_lateness_seconds`` | histogram | put completed minus the requested delivery time |
| ``pyrmq_scheduler_delay_delivered_total`` / ``_dropped_total`` / ``_duplicates_total`` | counter | the same for delay levels |
| ``pyrmq_scheduler_delay_offset{level}`` / ``pyrmq_scheduler_delay_lag{level}`` | gauge | per level: next SCHEDULE_TOPIC_XXXX offset, messages behind |
| ``pyrmq_scheduler_delay_lateness_seconds`` | histogram | put completed minus store time + level delay |
| ``rocketmq_timer_enqueue_lag`` | gauge | RocketMQ 5's name for the enqueue lag: rmq_sys_wheel_timer messages not yet enqueued (``getEnqueueBehindMessages``) |
| ``rocketmq_timer_dequeue_lag`` | gauge | RocketMQ 5's name for the timers in the wheel not yet delivered (``getDequeueBehindMessages``, the wheel's ``getAllNum`` from the read pointer; the value of ``pyrmq_scheduler_timer_pending``) |
| ``rocketmq_timer_dequeue_latency`` | gauge | ms from the wheel's read pointer to now (``getDequeueBehindMillis``; 0 before the first pass). RocketMQ declares milliseconds but records seconds; pyrmq records milliseconds |
| ``rocketmq_timing_messages{topic}`` | gauge | timer messages waiting in the wheel per real topic (``TimerMetrics.timingCount``, persisted in ``config/timermetrics``: ``timing_counts.py``) |
| ``rocketmq_timer_enqueue_latency`` | gauge | ms from the store time of the last rmq_sys_wheel_timer message enqueued to now while messages wait to be enqueued; 0 when the enqueue is caught up |
| ``rocketmq_timer_message_snapshot{timer_bound_s}`` | gauge | wheel units due within each bucket from now (5, 60, 300, 900, 3600, 14400, 28800, 86400 s upper bounds), taken on the timer thread every ``timer_snapshot_interval_ms`` |

RocketMQ's ``getEnqueueBehindMillis`` reports now minus the store time of the last message that
was already due when enqueued, for 2 s after it; pyrmq's value is the time the enqueue is behind
whenever it is behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from services.runtime.clock import Clock, SystemClock
from services.scheduler.timer_stats import HistogramSnapshot, SchedulerStats

log = logging.getLogger(__name__)

# (name, kind, help, field of TimerStats). Counters get "_total" from prometheus_client.
TIMER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("pyrmq_scheduler_timer_enqueued", "counter", "Timer messages written to the TimerLog.", "enqueued"),
    ("pyrmq_scheduler_timer_delivered", "counter", "Timer messages put into their real topic.", "delivered"),
    ("pyrmq_scheduler_timer_rolled", "counter", "Far-future timers re-put into rmq_sys_wheel_timer.", "rolled"),
    ("pyrmq_scheduler_timer_recall_markers", "counter", "Recall markers enqueued.", "recall_markers"),
    ("pyrmq_scheduler_timer_recalled", "counter", "Timers skipped because they were recalled.", "recalled"),
    ("pyrmq_scheduler_timer_dropped", "counter", "Timers that could not be delivered.", "dropped"),
    (
        "pyrmq_scheduler_timer_duplicates",
        "counter",
        "Timers delivered again after a crash although their first put may have landed.",
        "duplicates",
    ),
    ("pyrmq_scheduler_timer_pending", "gauge", "Timers not yet delivered (approximate).", "pending"),
    ("pyrmq_scheduler_timer_enqueue_lag", "gauge", "rmq_sys_wheel_timer messages not yet enqueued.", "enqueue_lag"),
    ("pyrmq_scheduler_timer_active_units", "gauge", "Units in memory for the slots being delivered.", "active_units"),
    ("pyrmq_scheduler_timer_read_time_ms", "gauge", "The wheel's read pointer, ms since the epoch.", "read_time_ms"),
)
DELAY_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("pyrmq_scheduler_delay_delivered", "counter", "Delay-level messages put into their real topic.", "delivered"),
    ("pyrmq_scheduler_delay_dropped", "counter", "Delay-level messages discarded.", "dropped"),
    (
        "pyrmq_scheduler_delay_duplicates",
        "counter",
        "Delay-level messages delivered again after a crash although their first put may have landed.",
        "duplicates",
    ),
)


def _histogram(name: str, help_text: str, snapshot: HistogramSnapshot) -> HistogramMetricFamily:
    buckets = [(str(bound), float(count)) for bound, count in snapshot.buckets]
    buckets.append(("+Inf", float(snapshot.count)))
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=snapshot.sum_s)


class SchedulerStatsCollector(Collector):
    def __init__(self, stats: Callable[[], SchedulerStats], clock: Clock) -> None:
        self._stats = stats
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self._stats()
        except Exception:  # a scrape must not fail while the scheduler stops
            log.warning("scheduler stats failed during a scrape", exc_info=True)
            return []
        return list(self._families(stats))

    def _families(self, stats: SchedulerStats) -> Iterator[Metric]:
        for source, table in ((stats.timer, TIMER_METRICS), (stats.delay, DELAY_METRICS)):
            for name, kind, help_text, field in table:
                family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, help_text)
                family.add_metric([], getattr(source, field))
                yield family
        timer = stats.timer
        for name, help_text, value in (
            ("rocketmq_timer_enqueue_lag", "Timer messages not yet enqueued into the wheel.", timer.enqueue_lag),
            ("rocketmq_timer_dequeue_lag", "Timer messages in the wheel not yet delivered.", timer.pending),
            (
                "rocketmq_timer_dequeue_latency",
                "Milliseconds from the wheel's read pointer to now.",
                max(0, self._clock.now_ms() - timer.read_time_ms) if timer.read_time_ms > 0 else 0,
            ),
            (
                "rocketmq_timer_enqueue_latency",
                "Milliseconds the timer enqueue is behind (0 when caught up).",
                max(0, self._clock.now_ms() - timer.enqueue_store_time_ms)
                if timer.enqueue_lag > 0 and timer.enqueue_store_time_ms > 0
                else 0,
            ),
        ):
            family = GaugeMetricFamily(name, help_text)
            family.add_metric([], value)
            yield family
        timing = GaugeMetricFamily(
            "rocketmq_timing_messages", "Timer messages waiting in the wheel, per real topic.", labels=["topic"]
        )
        for topic, count in timer.timing:
            timing.add_metric([topic], count)
        yield timing
        snapshot = GaugeMetricFamily(
            "rocketmq_timer_message_snapshot",
            "Timer messages due within each bucket from now (upper bound in seconds).",
            labels=["timer_bound_s"],
        )
        for bound_s, count in timer.distribution:
            snapshot.add_metric([str(bound_s)], count)
        yield snapshot
        yield _histogram(
            "pyrmq_scheduler_timer_lateness_seconds",
            "Delivery of a timer message (put completed) minus its requested time.",
            stats.timer.lateness,
        )
        yield _histogram(
            "pyrmq_scheduler_delay_lateness_seconds",
            "Delivery of a delay-level message minus its store time + level delay.",
            stats.delay.lateness,
        )
        offsets = GaugeMetricFamily(
            "pyrmq_scheduler_delay_offset", "Next SCHEDULE_TOPIC_XXXX offset per level.", labels=["level"]
        )
        lags = GaugeMetricFamily(
            "pyrmq_scheduler_delay_lag", "SCHEDULE_TOPIC_XXXX messages behind, per level.", labels=["level"]
        )
        for index, (offset, lag) in enumerate(zip(stats.delay.offsets, stats.delay.lags)):
            offsets.add_metric([str(index + 1)], offset)
            lags.add_metric([str(index + 1)], lag)
        yield offsets
        yield lags


class SchedulerMetrics:
    """Every metric of one scheduler process, in its own registry."""

    def __init__(self, stats: Callable[[], SchedulerStats], clock: Clock | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(SchedulerStatsCollector(stats, clock or SystemClock()))
