"""Counters of the timer and delay-level loops, read by ``metrics.py`` at scrape time.

The core counts with plain integers (one writer thread each); ``snapshot()`` copies them into
frozen dataclasses, the only thing the metrics module sees (docs/conventions.md, rule 14).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from services.scheduler.timing_counts import TimingCounts

# Delivery lateness buckets, seconds: timers are due on the millisecond, the target is p99 <= 200 ms.
LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


class LatenessHistogram:
    """Cumulative-on-read histogram of delivery lateness (ms in, seconds out)."""

    def __init__(self, buckets_s: tuple[float, ...] = LATENESS_BUCKETS_S) -> None:
        self.buckets_s = buckets_s
        self._bounds_ms = [b * 1000 for b in buckets_s]
        self.counts = [0] * (len(buckets_s) + 1)
        self.sum_s = 0.0
        self.count = 0

    def observe_ms(self, lateness_ms: float) -> None:
        lateness_ms = max(0.0, lateness_ms)
        self.counts[bisect.bisect_left(self._bounds_ms, lateness_ms)] += 1
        self.sum_s += lateness_ms / 1000
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        cumulative, running = [], 0
        for bound, count in zip(self.buckets_s, self.counts):
            running += count
            cumulative.append((bound, running))
        return HistogramSnapshot(tuple(cumulative), self.count, self.sum_s)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    buckets: tuple[tuple[float, int], ...]  # (upper bound in seconds, cumulative count)
    count: int
    sum_s: float


class TimerCounters:
    """Mutable counters of the timer store (written by the timer loop thread only)."""

    def __init__(self) -> None:
        self.enqueued = 0  # units appended for rmq_sys_wheel_timer messages (markers included)
        self.recall_markers = 0  # of which DELETE markers (recalls)
        self.delivered = 0  # re-put into their real topic
        self.rolled = 0  # re-put into rmq_sys_wheel_timer (far future)
        self.recalled = 0  # skipped: a recall marker named them
        self.dropped = 0  # not deliverable (missing record, bad properties, refused by the store)
        self.duplicates = 0  # re-delivered after a crash although possibly delivered before
        self.pending = 0  # approx.: units not yet delivered
        self.enqueue_lag = 0  # rmq_sys_wheel_timer messages not yet enqueued
        self.queue_offset = 0
        self.read_time_ms = 0
        self.watermark_ms = 0
        self.active_units = 0
        self.enqueue_store_time_ms = 0  # store time of the last rmq_sys_wheel_timer message enqueued
        self.distribution: tuple[tuple[int, int], ...] = ()  # (bucket bound s, units due in it), taken every few s
        self.timing = TimingCounts()  # per real topic, timers waiting in the wheel
        self.lateness = LatenessHistogram()

    def snapshot(self) -> TimerStats:
        return TimerStats(
            enqueued=self.enqueued,
            recall_markers=self.recall_markers,
            delivered=self.delivered,
            rolled=self.rolled,
            recalled=self.recalled,
            dropped=self.dropped,
            duplicates=self.duplicates,
            pending=max(0, self.pending),
            enqueue_lag=self.enqueue_lag,
            queue_offset=self.queue_offset,
            read_time_ms=self.read_time_ms,
            watermark_ms=self.watermark_ms,
            active_units=self.active_units,
            enqueue_store_time_ms=self.enqueue_store_time_ms,
            timing=self.timing.snapshot(),
            distribution=self.distribution,
            lateness=self.lateness.snapshot(),
        )


@dataclass(frozen=True, slots=True)
class TimerStats:
    enqueued: int
    recall_markers: int
    delivered: int
    rolled: int
    recalled: int
    dropped: int
    duplicates: int
    pending: int
    enqueue_lag: int
    queue_offset: int
    read_time_ms: int
    watermark_ms: int
    active_units: int
    enqueue_store_time_ms: int
    timing: tuple[tuple[str, int], ...]  # (real topic, timers waiting in the wheel)
    distribution: tuple[tuple[int, int], ...]  # (bucket upper bound in s, wheel units due in it)
    lateness: HistogramSnapshot


class DelayCounters:
    """Mutable counters of the delay-level loop."""

    def __init__(self, levels: int) -> None:
        self.delivered = 0
        self.dropped = 0
        self.duplicates = 0
        self.offsets = [0] * levels  # next queue offset per level (index level - 1)
        self.lags = [0] * levels  # messages behind per level
        self.lateness = LatenessHistogram()

    def snapshot(self) -> DelayStats:
        return DelayStats(
            self.delivered,
            self.dropped,
            self.duplicates,
            tuple(self.offsets),
            tuple(self.lags),
            self.lateness.snapshot(),
        )


@dataclass(frozen=True, slots=True)
class DelayStats:
    delivered: int
    dropped: int
    duplicates: int
    offsets: tuple[int, ...]
    lags: tuple[int, ...]
    lateness: HistogramSnapshot


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """What ``SchedulerService.stats`` answers (a scrape reads it: metrics.py)."""

    timer: TimerStats
    delay: DelayStats
