"""DelayLevelService: RocketMQ's delay levels (``ScheduleMessageService``).

Level L (``messageDelayLevel``, 18 by default: ``1s 5s 10s 30s 1m ... 2h``) parks messages in
``SCHEDULE_TOPIC_XXXX`` queue ``L - 1`` (``services.domain.contracts.delay``); the ConsumeQueue
tags code is the deliver time ``store time + delay(L)``, so each queue is already in delivery
order. Per level the service reads from its delay offset (the store's ``delayOffset.json``, via
Get/UpdateDelayOffset), and delivers each due message to ``REAL_TOPIC`` / ``REAL_QID`` with the
stored properties unchanged (``DELAY``, ``REAL_TOPIC`` and ``REAL_QID`` stay, as on a Java
broker; a real topic of ``RMQ_SYS_TRANS_HALF_TOPIC`` is discarded). A deliver time further ahead than the level's
delay (a clock that went back) counts as now. The level then waits until its next head is due
(or a store arrival in SCHEDULE_TOPIC_XXXX).

Crash safety: a batch's queue offsets are recorded in ``config/delaycheck`` before its put;
the store's delay offset moves after the put; the record is cleared after that. A record still
present at start-up marks messages that may already have been delivered: their second delivery
is counted in ``duplicates``.
"""

from __future__ import annotations

import logging

from services.domain.contracts.delay import level_delay_ms, unpark_delay_level
from services.domain.format.properties_format import REAL_TOPIC, UNIQ_KEY
from services.domain.names import SCHEDULE_TOPIC
from services.domain.statuses import GetStatus
from services.runtime.clock import Clock
from services.scheduler.check_files import DelayCheckFile
from services.scheduler.config import SchedulerConfig
from services.scheduler.model import APPENDED_STATUSES, PERMANENT_FAILURES
from services.scheduler.store_access import SchedulerStore, put_each_refused
from services.scheduler.timer_stats import DelayCounters, DelayStats
from services.store.client.errors import StoreError
from services.store.client.model import MessageToPut, StoredMessage, copy_to

log = logging.getLogger(__name__)

RETRY_DELAY_MS = 1_000  # after the store refused a delivery for now
WATCHED_IDLE_FACTOR = 20  # with arrivals followed, a caught-up level is read every 20 idle polls
_MOVED = frozenset(
    {
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        GetStatus.NO_MATCHED_MESSAGE,
        GetStatus.MESSAGE_WAS_REMOVING,
    }
)


class DelayLevelService:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        store: SchedulerStore,
        check_file: DelayCheckFile,
        arrivals_watched: bool = False,
    ) -> None:
        self._config = config
        self._clock = clock
        self._store = store
        self._check_file = check_file
        self.levels_ms = config.delay_level_ms
        levels = len(self.levels_ms)
        self.counters = DelayCounters(levels)
        self._offsets: list[int | None] = [None] * levels  # next offset to deliver, per level
        self._confirmed: list[int] = [0] * levels  # what the store has recorded
        self._suspects: list[tuple[int, int]] = [check_file.in_flight(level) for level in range(1, levels + 1)]
        self._next_check_ms: list[int] = [0] * levels
        self._woken = False
        self.arrivals_watched = arrivals_watched  # arrivals wake the levels: poll caught-up ones rarely

    # -- the loop ---------------------------------------------------------------------------
    def run_once(self) -> int:
        """Deliver what is due on every level whose time has come; messages handled."""
        now_ms = self._clock.now_ms()
        if self._woken:
            self._woken = False
            self._next_check_ms = [min(t, now_ms) for t in self._next_check_ms]
        work = 0
        for index, next_check_ms in enumerate(self._next_check_ms):
            if next_check_ms <= now_ms:
                work += self._run_level(index + 1, now_ms)
        return work

    def wake(self) -> None:
        """A message arrived in SCHEDULE_TOPIC_XXXX: look at every level again (any thread)."""
        self._woken = True

    def wait_hint_ms(self) -> int:
        if self._woken:
            return 0
        return max(0, min(self._next_check_ms) - self._clock.now_ms())

    def stats(self) -> DelayStats:
        return self.counters.snapshot()

    # -- one level ----------------------------------------------------------------------------
    def _offset(self, level: int) -> int:
        offset = self._offsets[level - 1]
        if offset is None:
            offset = self._store.get_delay_offset(level)
            self._offsets[level - 1] = self._confirmed[level - 1] = offset
            begin, end = self._suspects[level - 1]
            self._suspects[level - 1] = (max(begin, offset), end) if end > offset else (-1, -1)
            if end > offset:
                log.warning(
                    "delay level %d: messages %d..%d may have been delivered before a crash; delivering them again",
                    level,
                    max(begin, offset),
                    end,
                )
        return offset

    def _run_level(self, level: int, now_ms: int) -> int:
        index = level - 1
        offset = self._offset(level)
        result = self._store.get_messages(SCHEDULE_TOPIC, index, offset, self._config.delay_batch_messages)
        if result.status in _MOVED and not result.messages:
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                log.warning(
                    "delay level %d: offset %d out of [%d, %d]", level, offset, result.min_offset, result.max_offset
                )
            self._next_check_ms[index] = (
                now_ms if result.next_begin_offset != offset else (now_ms + self._config.idle_poll_interval_ms)
            )
            self._move(level, result.next_begin_offset)
            return 0
        # A record stored after ``now_ms`` was read would look like one from a clock that went
        # back and be delivered at once: judge what was read by the time after the read.
        now_ms = max(now_ms, self._clock.now_ms())
        counters = self.counters
        counters.lags[index] = max(0, result.max_offset - offset)
        level_ms = self.levels_ms[index]
        due: list[tuple[StoredMessage, int]] = []
        idle_ms = self._config.idle_poll_interval_ms * (WATCHED_IDLE_FACTOR if self.arrivals_watched else 1)
        self._next_check_ms[index] = now_ms + idle_ms
        for record in result.messages:
            deliver_ms = record.store_timestamp_ms + self._level_delay_ms(record, level_ms)
            if deliver_ms > now_ms + level_ms:
                deliver_ms = now_ms  # correctDeliverTimestamp: a clock that went back
            if deliver_ms > now_ms:
                self._next_check_ms[index] = deliver_ms
                break
            due.append((record, deliver_ms))
        else:
            if result.messages and result.next_begin_offset < result.max_offset:
                self._next_check_ms[index] = now_ms  # more are queued: come back at once
        if due:
            self._deliver(level, due)
        return len(due)

    def _level_delay_ms(self, record: StoredMessage, queue_level_ms: int) -> int:
        """The store's tags code rule: the DELAY property's level (capped), else the queue's."""
        delay_ms = level_delay_ms(record.properties, self.levels_ms)
        return queue_level_ms if delay_ms is None else delay_ms

    def _deliver(self, level: int, due: list[tuple[StoredMessage, int]]) -> None:
        index = level - 1
        counters = self.counters
        end = due[-1][0].queue_offset + 1
        out: list[MessageToPut] = []
        sent: list[tuple[StoredMessage, int]] = []
        for record, deliver_ms in due:
            destination = unpark_delay_level(record.properties)
            if destination is None:
                log.error(
                    "delay level %d: message at %d has real topic %r; discarded",
                    level,
                    record.queue_offset,
                    record.properties.get(REAL_TOPIC),
                )
                counters.dropped += 1
                continue
            out.append(copy_to(record, destination[0], destination[1], dict(record.properties)))
            sent.append((record, deliver_ms))
        next_offset = end
        if out:
            self._check_file.mark(level, self._confirmed[index], end)
            try:
                outcomes = put_each_refused(self._store, out)
            except StoreError:
                self._suspects[index] = (sent[0][0].queue_offset, end)  # it may have landed
                raise
            done_ms = self._clock.now_ms()
            begin, suspect_end = self._suspects[index]
            for (record, deliver_ms), message, outcome in zip(sent, out, outcomes):
                if outcome.status in APPENDED_STATUSES:
                    counters.delivered += 1
                    counters.lateness.observe_ms(done_ms - deliver_ms)
                    if begin <= record.queue_offset < suspect_end:
                        counters.duplicates += 1
                elif outcome.status in PERMANENT_FAILURES:
                    log.error(
                        "store refused delayed message %s for %s-%d: %s %s; dropped",
                        message.properties.get(UNIQ_KEY),
                        message.topic,
                        message.queue_id,
                        outcome.status.name,
                        outcome.error,
                    )
                    counters.dropped += 1
                else:  # not appended, retry from here; later ones may have landed
                    log.warning(
                        "store did not take delayed message %s (%s); retrying",
                        message.properties.get(UNIQ_KEY),
                        outcome.status.name,
                    )
                    next_offset = record.queue_offset
                    self._suspects[index] = (record.queue_offset + 1, end)
                    self._next_check_ms[index] = done_ms + RETRY_DELAY_MS
                    break
        self._move(level, next_offset)

    def _move(self, level: int, offset: int) -> None:
        """Record a level's new offset in the store (then forget the in-flight batch)."""
        index = level - 1
        self._offsets[index] = offset
        self.counters.offsets[index] = offset
        if offset == self._confirmed[index]:
            return
        self._store.update_delay_offset(level, offset)
        self._confirmed[index] = offset
        self._check_file.clear(level)
        if self._suspects[index][1] <= offset:
            self._suspects[index] = (-1, -1)
