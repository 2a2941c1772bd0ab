"""TimerStore: RocketMQ 5 timer messages, persisted in RocketMQ's timer files.

Data flow::

    rmq_sys_wheel_timer/0 ──GetMessages──► TimerEnqueue ──► TimerLog (52-byte units, chained per slot)
                                                  │                └► TimerWheel (slot -> chain head)
                                                  ▼ watermark
    real topic / queue ◄──PutMessages── TimerDequeue ◄── due slots (LookMessages by CommitLog offset)
    rmq_sys_wheel_timer/0 ◄── ROLL re-puts (beyond the roll window)

Files (under ``<data-dir>/scheduler``): ``timerlog/``, ``timerwheel``, ``config/timercheck``,
``config/timermetrics`` (per-topic counts of waiting timers: ``timing_counts.py``).
Memory holds only the units of the slots being delivered (``timer_active_units_max``); the
TimerLog is read and written with pread/pwrite, so ten million pending timers cost disk, not
RAM.

Crash safety (the argument, in order):

1. Everything written goes to the page cache at once (pwrite, mmap): a ``kill -9`` of the
   scheduler loses no write it made; only a power loss loses unflushed ones.
2. ``flush`` fdatasyncs the TimerLog, then msyncs the wheel, then writes the checkpoint with
   the read pointer, the flushed TimerLog end and the queue offset taken *together* before the
   flush: the checkpoint never runs ahead of durable data.
3. ``open`` rescans the TimerLog from the checkpoint's flushed end (each unit has a crc),
   truncates at the first bad unit, re-heads wheel slots for the units found (idempotent),
   clears wheel slots pointing past the end (a wheel written back before the log), and
   re-derives the queue offset from the last unit's message: nothing is enqueued twice or
   skipped.
4. Each unit's dequeue state lives in the unit: delivered units are never delivered again;
   units whose put was in flight are delivered again and counted as possible duplicates. Slots
   are re-read from the checkpointed read pointer, so every undelivered unit is found again.
"""

from __future__ import annotations

import logging

import numpy as np

from services.domain.format.timercheck_format import TimerCheck
from services.domain.format.timerlog_format import (
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_DTYPE,
    UNIT_SIZE_BYTES,
    TimerUnit,
)
from services.runtime.clock import Clock
from services.scheduler.check_files import TimerCheckFile, TimerMetricsFile
from services.scheduler.config import SchedulerConfig
from services.scheduler.store_access import SchedulerStore
from services.scheduler.timer_dequeue import TimerDequeue
from services.scheduler.timer_enqueue import TimerEnqueue
from services.scheduler.timer_log import SCAN_CHUNK_UNITS, TimerLog
from services.scheduler.timer_stats import TimerCounters, TimerStats
from services.scheduler.timer_wheel import TimerWheel
from services.scheduler.timing_counts import rebuild_from_log

# rocketmq_timer_message_snapshot's buckets (RocketMQ's TimerMetrics.timerDist), upper bounds in s
SNAPSHOT_BOUNDS_S = (5, 60, 300, 900, 3600, 14400, 28800, 86400)

log = logging.getLogger(__name__)


class TimerStore:
    def __init__(
        self, config: SchedulerConfig, clock: Clock, store: SchedulerStore, arrivals_watched: bool = False
    ) -> None:
        """``arrivals_watched``: the store's arrival announcements reach ``enqueue.notify_arrival``
        (a caught-up enqueue then reads only when one came)."""
        self.config = config
        self._arrivals_watched = arrivals_watched
        self._clock = clock
        self._store = store
        self.counters = TimerCounters()
        self.timer_log = TimerLog(config.timerlog_dir, config.timerlog_file_size_bytes)
        self.wheel: TimerWheel | None = None
        self.check_file: TimerCheckFile | None = None
        self.metrics_file = TimerMetricsFile(config.timermetrics_path)
        self.enqueue: TimerEnqueue | None = None
        self.dequeue: TimerDequeue | None = None
        self._check_counter = 0
        self._next_flush_s = 0.0
        self._next_cleanup_s = 0.0
        self._next_snapshot_s = 0.0
        self._segment_max_slot_ms: dict[int, int] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the files and recover them (no store call: the queue offset is resolved on the
        enqueue's first run)."""
        config = self.config
        precision_ms = config.timer_precision_ms
        self.check_file = TimerCheckFile(config.timercheck_path)
        check = self.check_file.loaded
        self._check_counter = check.counter
        self.timer_log.load()
        self.wheel = TimerWheel(config.timerwheel_path, config.timer_wheel_slots, precision_ms)
        now_ms = self._clock.now_ms()
        read_time_ms = self._read_pointer(check, now_ms)

        timing = self.counters.timing
        document = self.metrics_file.load(check.counter) if check.valid else None
        if document is not None:
            timing.load(document)
        scan_from = check.last_timer_log_flush_pos if check.valid else self.timer_log.min_pos
        last_unit: TimerUnit | None = None
        replayed = 0
        for position, unit in self.timer_log.scan(scan_from):
            delta = -1 if unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL else 1
            self.wheel.revise_slot(unit.delayed_ms - unit.delayed_ms % precision_ms, position, delta)
            if document is not None and not unit.magic & MAGIC_DELETE and unit.delayed_ms >= read_time_ms:
                timing.note_unit(unit.topic_hash, unit.offset_py, unit.size_py)  # appended after the counts
            last_unit = unit
            replayed += 1
        end = self.timer_log.scan_end if self.timer_log.segment_starts() else 0
        if end < self.timer_log.write_pos:
            self.timer_log.truncate(end)
        self._clear_slots_past(end, read_time_ms)
        if document is None and self.timer_log.segment_starts():
            noted = rebuild_from_log(timing, self.timer_log, read_time_ms)
            log.warning("no timermetrics for this checkpoint: %d waiting timers counted from the TimerLog", noted)
        log.info(
            "timer log recovered: %d units after the checkpoint, end at %d, read time %d", replayed, end, read_time_ms
        )

        self.dequeue = TimerDequeue(
            config, self._clock, self._store, self.timer_log, self.wheel, self.counters, read_time_ms
        )
        self.enqueue = TimerEnqueue(
            config,
            self._clock,
            self._store,
            self.timer_log,
            self.wheel,
            self.dequeue,
            self.counters,
            check.last_timer_queue_offset if check.valid else 0,
            last_unit,
            self._arrivals_watched,
        )
        self.counters.pending = self.wheel.pending_count(read_time_ms)
        self.counters.read_time_ms = read_time_ms
        self._next_flush_s = self._clock.monotonic_s() + config.timer_flush_interval_ms / 1000

    def _read_pointer(self, check: TimerCheck, now_ms: int) -> int:
        """The checkpoint's read time, but never so old that the ring may have wrapped over it."""
        precision_ms = self.config.timer_precision_ms
        oldest_ms = now_ms - (self.config.wheel_span_ms - self.config.roll_window_ms - 60 * precision_ms)
        oldest_ms -= oldest_ms % precision_ms
        if not check.valid and not self.timer_log.segment_starts():
            return now_ms - now_ms % precision_ms  # a new scheduler: nothing to catch up on
        read_time_ms = check.last_read_time_ms if check.valid else 0
        read_time_ms -= read_time_ms % precision_ms
        if read_time_ms < oldest_ms:
            if check.valid and read_time_ms > 0:
                log.error(
                    "timer read time %d is older than the wheel can hold; timers due before %d may have "
                    "been overwritten",
                    read_time_ms,
                    oldest_ms,
                )
            read_time_ms = oldest_ms
        return read_time_ms

    def _clear_slots_past(self, end: int, read_time_ms: int) -> None:
        """Slots whose chain head lies past the TimerLog's end (the wheel reached the disk before
        the log did, then power was lost): re-head each at its last unit below ``end``."""
        assert self.wheel is not None
        precision_ms = self.config.timer_precision_ms
        with self.wheel.slot_table() as table:
            stale = (table["time"] >= read_time_ms // precision_ms) & (table["last_pos"] >= end)
            if not stale.any():
                return
            times = {int(t) * precision_ms for t in table["time"][stale]}
            first = max(0, int(table["first_pos"][stale].min()))
            del stale
        log.warning("%d wheel slots point past the TimerLog end %d; rescanning from %d", len(times), end, first)
        heads: dict[int, int] = {}
        for position, unit in self.timer_log.scan(first - first % UNIT_SIZE_BYTES if first < end else end):
            if position >= end:
                break
            slot_ms = unit.delayed_ms - unit.delayed_ms % precision_ms
            if slot_ms in times:
                heads[slot_ms] = position
        for slot_ms in times:
            slot = self.wheel.get_slot(slot_ms)
            head = heads.get(slot_ms, -1)
            self.wheel.put_slot(slot_ms, slot.first_pos if head >= 0 else -1, head, slot.num if head >= 0 else 0)

    def close(self, flush: bool = True) -> None:
        """Stop using the files; ``flush`` first (a clean stop), or not (as a crash would)."""
        if self.enqueue is not None:
            self.enqueue.close()
        if flush and self.wheel is not None and self.check_file is not None:
            self.flush()
        else:
            self.timer_log.commit()
        self.timer_log.close()
        if self.wheel is not None:
            self.wheel.close()
            self.wheel = None
        if self.check_file is not None:
            self.check_file.close()
            self.check_file = None

    # -- the loop ---------------------------------------------------------------------------
    def run_once(self) -> int:
        """One enqueue batch, one dequeue pass, and a flush / cleanup / snapshot when due. Work done."""
        assert self.enqueue is not None and self.dequeue is not None
        if self.counters.timing.unresolved:  # units counted at start-up, known by topic hash only
            self.counters.timing.resolve(self._store)
        need_watermark = self.dequeue.waiting_for_watermark(self._clock.now_ms(), self.enqueue.watermark_ms)
        work = self.enqueue.run_once(need_watermark)
        work += self.dequeue.run_once(self.enqueue.watermark_ms)
        now_s = self._clock.monotonic_s()
        if now_s >= self._next_flush_s:
            self.flush()
            self._next_flush_s = now_s + self.config.timer_flush_interval_ms / 1000
        if now_s >= self._next_cleanup_s:
            self.cleanup()
            self._next_cleanup_s = now_s + self.config.timerlog_cleanup_interval_ms / 1000
        if now_s >= self._next_snapshot_s:
            self.take_snapshot()
            self._next_snapshot_s = now_s + self.config.timer_snapshot_interval_ms / 1000
        return work

    def take_snapshot(self) -> None:
        """RocketMQ's timer distribution: wheel units due in each bucket from now (5 s, 1 min,
        ... 24 h), read on this thread (the wheel is this thread's) and kept for the scrape."""
        assert self.wheel is not None
        precision_ms = self.config.timer_precision_ms
        bounds_slots = [bound_s * 1000 // precision_ms for bound_s in SNAPSHOT_BOUNDS_S]
        counts = self.wheel.counts_ahead(self._clock.now_ms(), bounds_slots)
        self.counters.distribution = tuple(zip(SNAPSHOT_BOUNDS_S, counts))

    def wait_hint_ms(self) -> int:
        """How long the loop may sleep before there is something to do (arrivals wake it)."""
        assert self.enqueue is not None and self.dequeue is not None
        config = self.config
        now_ms = self._clock.now_ms()
        if not self.enqueue.caught_up:
            return 0
        if self.dequeue.waiting_for_watermark(now_ms, self.enqueue.watermark_ms):
            return config.poll_interval_ms
        wake_ms = self.dequeue.snapshot_time_ms - config.timer_lookahead_ms
        if self.dequeue.next_due_ms is not None:
            wake_ms = min(wake_ms, max(self.dequeue.next_due_ms, self.dequeue.next_pass_ms))
        return max(1, min(config.idle_poll_interval_ms, wake_ms - now_ms))

    def flush(self) -> None:
        """Make everything durable, then checkpoint it (never ahead of what is on disk)."""
        assert self.wheel is not None and self.check_file is not None
        assert self.enqueue is not None and self.dequeue is not None
        self.timer_log.commit()
        queue_offset = self.enqueue.queue_offset
        read_time_ms = self.dequeue.read_time_ms
        flushed_pos = self.timer_log.flush()
        self.wheel.flush()
        if queue_offset is None:  # never talked to the store: keep the loaded offset
            queue_offset = self.check_file.loaded.last_timer_queue_offset
        if self.counters.timing.unresolved:
            return  # no enqueue or dequeue ran yet: the checkpoint loaded still describes the files
        self._check_counter += 1
        document = self.counters.timing.document(read_time_ms, self._check_counter, self._clock.now_ms())
        if document is not None:  # written first: a file ahead of timercheck is never trusted
            self.metrics_file.save(document)
        self.check_file.save(
            TimerCheck(
                last_read_time_ms=read_time_ms,
                last_timer_log_flush_pos=flushed_pos,
                last_timer_queue_offset=queue_offset,
                master_timer_queue_offset=queue_offset,
                timestamp_ms=self._clock.now_ms(),
                counter=self._check_counter,
            )
        )

    def cleanup(self) -> int:
        """Delete TimerLog segments (never the last) whose units all belong to done slots."""
        assert self.dequeue is not None
        read_time_ms = self.dequeue.read_time_ms
        starts = self.timer_log.segment_starts()
        deleted = 0
        for start in starts[:-1]:
            max_slot_ms = self._segment_max_slot_ms.get(start)
            if max_slot_ms is None:
                max_slot_ms = self._segment_max_slot_ms[start] = self._max_slot_ms(start)
            if max_slot_ms >= read_time_ms:
                break
            self.timer_log.delete_segment(start)
            del self._segment_max_slot_ms[start]
            deleted += 1
        if deleted:
            log.info("deleted %d delivered TimerLog segments", deleted)
        return deleted

    def _max_slot_ms(self, start: int) -> int:
        """The latest slot any unit of a closed segment belongs to (read in chunks)."""
        precision_ms = self.config.timer_precision_ms
        size = self.config.timerlog_file_size_bytes
        latest = -1
        chunk_bytes = SCAN_CHUNK_UNITS * UNIT_SIZE_BYTES
        for offset in range(0, size - size % UNIT_SIZE_BYTES, chunk_bytes):
            data = self.timer_log.read_range(start, offset, min(chunk_bytes, size - offset))
            units = np.frombuffer(data[: len(data) - len(data) % UNIT_SIZE_BYTES], dtype=UNIT_DTYPE)
            valid = units[units["size"] == UNIT_SIZE_BYTES]
            if len(valid):
                delayed = valid["write_time_ms"].astype(np.int64) + valid["delay_ms"].astype(np.int64)
                latest = max(latest, int(delayed.max()))
            if len(valid) < len(units):
                break
        return latest - latest % precision_ms if latest >= 0 else -1

    def stats(self) -> TimerStats:
        return self.counters.snapshot()
