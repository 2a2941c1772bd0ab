"""TimerEnqueue: reads ``rmq_sys_wheel_timer`` queue 0 and appends one TimerLog unit per message.

For each message (in queue order): the delivery time D is ``TIMER_DELIVER_MS`` when it agrees
with the broker's rounded ``TIMER_OUT_MS`` (``TIMER_OUT_MS < D <= TIMER_OUT_MS + P``), else
``TIMER_OUT_MS + P`` (never earlier than RocketMQ would deliver). The unit's ``delayed_ms`` is
``D - 1``; beyond the roll window it is a ROLL unit parked half a window or a window ahead
(RocketMQ's ``doEnqueue``), re-put into ``rmq_sys_wheel_timer`` when that slot comes. A
``TIMER_DEL_UNIQKEY`` message is a DELETE (recall) marker. The unit goes at the head of its
slot's chain (``prev_pos`` = the slot's ``last_pos``), and the slot is updated.

Progress: ``queue_offset`` is the next message to read. It is never checkpointed ahead of the
units: at start-up it is re-derived from the last unit in the TimerLog (the queue offset of
its message, + 1), so a restart neither skips nor re-appends a message.

Watermark: every message stored before ``watermark_ms`` has its unit. A read that finds the
queue caught up at time t moves it to ``t - store_dispatch_margin_ms`` (a message appended
that long ago is in the ConsumeQueue); enqueuing a message stored at s moves it to ``s - 1``
(store timestamps grow with queue offsets). The dequeue's recall gate reads it.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from zlib import crc32

from services.domain.contracts.delay import TIMER_QUEUE_ID, delivery_time_ms
from services.domain.format.java_compat import java_string_hash
from services.domain.format.properties_format import REAL_TOPIC, TIMER_DEL_UNIQKEY
from services.domain.format.timerlog_format import HEAD as UNIT_HEAD
from services.domain.format.timerlog_format import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    NO_POS,
    STATE_PENDING,
    UNIT_SIZE_BYTES,
    TimerUnit,
)
from services.domain.format.timerlog_format import TAIL as UNIT_TAIL
from services.domain.names import TIMER_TOPIC
from services.domain.statuses import GetStatus
from services.runtime.clock import Clock
from services.scheduler.config import SchedulerConfig
from services.scheduler.store_access import SchedulerStore
from services.scheduler.timer_dequeue import TimerDequeue
from services.scheduler.timer_log import TimerLog
from services.scheduler.timer_stats import TimerCounters
from services.scheduler.timer_wheel import TimerWheel
from services.store.client.model import GetOutcome, StoredMessage

log = logging.getLogger(__name__)

_CAUGHT_UP = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE})


class TimerEnqueue:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        store: SchedulerStore,
        timer_log: TimerLog,
        wheel: TimerWheel,
        dequeue: TimerDequeue,
        counters: TimerCounters,
        checkpoint_offset: int,
        last_unit: TimerUnit | None,
        arrivals_watched: bool = False,
    ) -> None:
        self._config = config
        self._precision_ms = config.timer_precision_ms
        self._clock = clock
        self._store = store
        self._log = timer_log
        self._wheel = wheel
        self._dequeue = dequeue
        self._counters = counters
        self._checkpoint_offset = checkpoint_offset
        self._last_unit = last_unit
        self.queue_offset: int | None = None  # resolved against the store on the first run
        self.watermark_ms = 0
        self.caught_up = False
        # While behind, the next batch is read on this thread while the current one is
        # appended: (queue offset, time the read started, the read).
        self._executor: ThreadPoolExecutor | None = None
        self._prefetch: tuple[int, int, Future[GetOutcome]] | None = None
        # With the store's arrival announcements followed (``arrivals_watched``), a caught-up
        # enqueue reads again only when one came, when the dequeue needs the watermark, or
        # after ``idle_poll_interval_ms``; without, it reads on every pass.
        self.arrivals_watched = arrivals_watched
        self._arrived = True
        self._last_read_ms = 0

    def notify_arrival(self) -> None:
        """The store announced a new rmq_sys_wheel_timer message (any thread)."""
        self._arrived = True

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._prefetch = None

    def _fetch(self, offset: int) -> tuple[int, GetOutcome]:
        """(time the read started, the batch at ``offset``), from the prefetch if it has it."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is not None and prefetch[0] == offset:
            return prefetch[1], prefetch[2].result()
        started_ms = self._clock.now_ms()
        return started_ms, self._store.get_messages(
            TIMER_TOPIC, TIMER_QUEUE_ID, offset, self._config.timer_enqueue_batch_messages
        )

    def _start_prefetch(self, offset: int) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="timer-prefetch")
        self._prefetch = (
            offset,
            self._clock.now_ms(),
            self._executor.submit(
                self._store.get_messages, TIMER_TOPIC, TIMER_QUEUE_ID, offset, self._config.timer_enqueue_batch_messages
            ),
        )

    def resolve_start_offset(self) -> int:
        """The first queue offset to read: after the last unit's message, else the checkpoint's."""
        offset = self._checkpoint_offset
        unit = self._last_unit
        if unit is not None:
            record = self._store.look_messages([(unit.offset_py, unit.size_py)]).get(unit.offset_py)
            if record is not None and record.topic == TIMER_TOPIC and record.store_size_bytes == unit.size_py:
                offset = record.queue_offset + 1
            else:
                log.warning(
                    "the last TimerLog unit's message (CommitLog offset %d) is gone; resuming at the "
                    "checkpoint's queue offset %d (units after it may be appended twice)",
                    unit.offset_py,
                    offset,
                )
        low, high = self._store.queue_offsets(TIMER_TOPIC, TIMER_QUEUE_ID)
        if offset < low:
            log.warning("rmq_sys_wheel_timer messages %d..%d are gone from the store; not scheduled", offset, low)
            offset = low
        elif offset > high:
            log.warning("rmq_sys_wheel_timer ends at %d, before the scheduler's %d (store data lost?)", high, offset)
            offset = high
        self.queue_offset = offset
        self._counters.queue_offset = offset
        log.info("timer enqueue starts at rmq_sys_wheel_timer offset %d", offset)
        return offset

    def run_once(self, need_watermark: bool = True) -> int:
        """Read one batch and append its units; the number of messages read. A caught-up
        enqueue that follows arrivals skips the read unless ``need_watermark`` or one came."""
        if self.queue_offset is None:
            self.resolve_start_offset()
        assert self.queue_offset is not None
        if (
            self.caught_up
            and self.arrivals_watched
            and not self._arrived
            and not need_watermark
            and self._clock.now_ms() < self._last_read_ms + self._config.idle_poll_interval_ms
        ):
            return 0
        self._arrived = False
        started_ms, result = self._fetch(self.queue_offset)
        self._last_read_ms = started_ms
        messages = result.messages
        if len(messages) >= self._config.timer_enqueue_batch_messages:
            self._start_prefetch(result.next_begin_offset)
        if messages:
            now_ms = self._clock.now_ms()
            for record in messages:
                self._enqueue(record, now_ms)
            self._log.commit()
            self.watermark_ms = max(self.watermark_ms, messages[-1].store_timestamp_ms - 1)
            self._counters.enqueue_store_time_ms = messages[-1].store_timestamp_ms
        if result.status is GetStatus.FOUND or result.status in (
            GetStatus.NO_MATCHED_MESSAGE,
            GetStatus.MESSAGE_WAS_REMOVING,
            GetStatus.OFFSET_TOO_SMALL,
            GetStatus.OFFSET_OVERFLOW_BADLY,
        ):
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                log.warning(
                    "rmq_sys_wheel_timer offset %d is out of [%d, %d]; moving to %d",
                    self.queue_offset,
                    result.min_offset,
                    result.max_offset,
                    result.next_begin_offset,
                )
            self.queue_offset = result.next_begin_offset
        self.caught_up = result.status in _CAUGHT_UP or (
            result.status is GetStatus.FOUND and result.next_begin_offset >= result.max_offset
        )
        if self.caught_up:
            self.watermark_ms = max(self.watermark_ms, started_ms - self._config.store_dispatch_margin_ms)
        counters = self._counters
        counters.queue_offset = self.queue_offset
        counters.enqueue_lag = max(0, result.max_offset - self.queue_offset)
        counters.watermark_ms = self.watermark_ms
        return len(messages)

    def _enqueue(self, record: StoredMessage, now_ms: int) -> None:
        properties = record.properties
        precision_ms = self._precision_ms
        deliver_ms = delivery_time_ms(properties, precision_ms)
        if deliver_ms is None:
            log.error("rmq_sys_wheel_timer message at %d has no delivery time; dropped", record.phy_offset)
            self._counters.dropped += 1
            return
        if deliver_ms - now_ms > self._config.timer_max_delay_ms:
            log.error(
                "rmq_sys_wheel_timer message at %d is due %d ms ahead, beyond timer_max_delay_ms; dropped",
                record.phy_offset,
                deliver_ms - now_ms,
            )
            self._counters.dropped += 1
            return
        marker_key = properties.get(TIMER_DEL_UNIQKEY)
        write_time_ms = now_ms - now_ms % precision_ms
        delayed_ms = deliver_ms - 1
        magic = MAGIC_DEFAULT | (MAGIC_DELETE if marker_key else 0)
        window_ms = self._config.roll_window_ms
        if delayed_ms - write_time_ms >= window_ms:
            magic |= MAGIC_ROLL
            if delayed_ms - write_time_ms - window_ms < window_ms // 3:
                delayed_ms = write_time_ms + window_ms // 2  # leave time for the next roll
            else:
                delayed_ms = write_time_ms + window_ms
        slot_ms, delayed_ms = self._dequeue.placement(delayed_ms)
        wheel = self._wheel
        slot_pos, first_pos, last_pos, num = wheel.head(slot_ms)
        real_topic = properties.get(REAL_TOPIC)
        topic_hash = java_string_hash(real_topic) if real_topic else 0
        head = UNIT_HEAD.pack(
            UNIT_SIZE_BYTES,
            last_pos,
            magic,
            write_time_ms,
            delayed_ms - write_time_ms,
            record.phy_offset,
            record.store_size_bytes,
            topic_hash,
        )
        position = self._log.append_encoded(head + UNIT_TAIL.pack(crc32(head), STATE_PENDING))
        delete = bool(magic & MAGIC_DELETE)
        wheel.relink(
            slot_pos, slot_ms, position if first_pos == NO_POS else first_pos, position, num + (-1 if delete else 1)
        )
        counters = self._counters
        counters.enqueued += 1
        if delete:
            counters.recall_markers += 1
        if not delete or magic & MAGIC_ROLL:
            counters.pending += 1
        if not delete and real_topic:
            counters.timing.add(real_topic, 1)
        if slot_ms < self._dequeue.snapshot_time_ms:  # a loaded (or passed) slot: tell the dequeue
            unit = TimerUnit(
                last_pos,
                magic,
                write_time_ms,
                delayed_ms - write_time_ms,
                record.phy_offset,
                record.store_size_bytes,
                topic_hash,
            )
            self._dequeue.on_appended(
                slot_ms, position, unit, marker_key if delete and not magic & MAGIC_ROLL else None
            )
