"""TimerDequeue: walks due wheel slots and re-puts their messages (RocketMQ's dequeue side).

Slots and times (P = ``timer_precision_ms``):

* A unit's ``delayed_ms`` is its exact delivery time D minus 1 ms; its slot is
  ``floor(delayed_ms / P) * P``, which is the broker's ``TIMER_OUT_MS`` (D rounded down, one
  tick earlier when D is on a tick). So a slot ``X`` holds deliveries in ``(X, X + P]``.
* ``read_time_ms`` (C, checkpointed as ``lastReadTimeMs``): every slot before it is done.
  ``snapshot_time_ms`` (S): the next slot to load. Slots in ``[C, S)`` are *active*: their
  pending units sit in one in-memory heap ordered by (due, position), bounded by
  ``timer_active_units_max``.
* A slot is loaded ``timer_lookahead_ms`` before it starts; each unit is delivered at its own
  due time (batched every ``timer_delivery_interval_ms``), so lateness is the loop's latency,
  not the slot width.

Recall (RocketMQ 5.3 RecallMessage): a DELETE unit carries ``TIMER_DEL_UNIQKEY`` =
``REAL_TOPIC+UNIQ_KEY`` in the same slot as its target (its ``TIMER_DELIVER_MS`` is the
target's ``TIMER_OUT_MS + 1``). The broker refuses a recall once ``now > TIMER_OUT_MS``, so
every accepted marker was stored before the slot began. Gate: a unit of slot X is delivered
only when the watermark (every ``rmq_sys_wheel_timer`` message stored before it is enqueued)
has passed ``X + 1 + timer_recall_guard_ms``; by then every marker for it is known. Markers
found when a slot is loaded, or enqueued while it is active, go into ``delete_keys`` until the
read pointer passes their slot.

Crash safety: each unit's state in the TimerLog goes DELIVERING just before its PutMessages
and DONE after the store appended it (or it was recalled / dropped). After a restart the
active slots are re-walked from C: DONE units are skipped; DELIVERING ones may have landed,
are delivered again and counted in ``duplicates``. Nothing is delivered before its time: a
unit is due at ``delayed_ms + 1``, and a unit that arrives after its slot was read
(store-side skew, a slow put) is placed into slot C with ``delayed_ms = C``, still past D.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

from services.domain.contracts.delay import delete_key_of, roll_timer, unpark_timer
from services.domain.format.properties_format import REAL_TOPIC, TIMER_DEL_UNIQKEY, UNIQ_KEY
from services.domain.format.timerlog_format import (
    MAGIC_DELETE,
    MAGIC_ROLL,
    NO_POS,
    STATE_DELIVERING,
    STATE_DONE,
    STATE_PENDING,
    TimerUnit,
)
from services.domain.names import TIMER_TOPIC
from services.runtime.clock import Clock
from services.scheduler.config import SchedulerConfig
from services.scheduler.model import APPENDED_STATUSES, PERMANENT_FAILURES
from services.scheduler.store_access import SchedulerStore, put_each_refused
from services.scheduler.timer_log import TimerLog
from services.scheduler.timer_stats import TimerCounters
from services.scheduler.timer_wheel import TimerWheel
from services.store.client.errors import StoreError
from services.store.client.model import MessageToPut, StoredMessage, copy_to

log = logging.getLogger(__name__)

SLOTS_PER_RUN_MAX = 100_000  # empty slots skipped per run_once (catch-up after a long stop)
RETRY_DELAY_MS = 1_000  # a unit the store refused for now is retried this much later


@dataclass(slots=True)
class ActiveSlot:
    time_ms: int
    pending: int = 0  # units of this slot in the heap
    resume_pos: int = NO_POS  # chain position of the next unit not loaded yet (slot over budget)


# Heap entry: (due_ms, position, slot_ms, gate_ms, offset_py, size_py, magic, write_time_ms, duplicate)
Entry = tuple[int, int, int, int, int, int, int, int, bool]


class TimerDequeue:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        store: SchedulerStore,
        timer_log: TimerLog,
        wheel: TimerWheel,
        counters: TimerCounters,
        read_time_ms: int,
    ) -> None:
        self._config = config
        self._precision_ms = config.timer_precision_ms
        self._clock = clock
        self._store = store
        self._log = timer_log
        self._wheel = wheel
        self._counters = counters
        self.read_time_ms = read_time_ms  # C
        self.snapshot_time_ms = read_time_ms  # S
        self.active: dict[int, ActiveSlot] = {}
        self._heap: list[Entry] = []
        self.delete_keys: dict[str, int] = {}  # TIMER_DEL_UNIQKEY -> slot it came from
        self.next_due_ms: int | None = None  # for the loop's sleep: earliest due unit
        self.next_pass_ms = 0  # no delivery pass before (timer_delivery_interval_ms)

    # -- placement (called by the enqueue) ------------------------------------------------------
    def slot_of(self, delayed_ms: int) -> int:
        return delayed_ms - delayed_ms % self._precision_ms

    def placement(self, delayed_ms: int) -> tuple[int, int]:
        """(slot, delayed_ms) for a new unit. A slot already done is replaced by the read
        pointer's: the unit is overdue (its time is at or before that slot's start, so it is
        still never early) and is delivered with the read pointer's slot."""
        slot = self.slot_of(delayed_ms)
        if slot < self.read_time_ms:
            return self.read_time_ms, self.read_time_ms
        return slot, delayed_ms

    def on_appended(self, slot_ms: int, position: int, unit: TimerUnit, marker_key: str | None) -> None:
        """A unit was appended to ``slot_ms``'s chain. A slot not loaded yet reads it when it
        is; a loaded one (or one passed while it was empty) gets it in memory now."""
        if slot_ms >= self.snapshot_time_ms:
            return
        if marker_key is not None:
            self.delete_keys[marker_key] = slot_ms
            return
        active = self.active.get(slot_ms)
        if active is None:
            active = self.active[slot_ms] = ActiveSlot(slot_ms)
        self._push(active, position, unit, duplicate=False)

    # -- the loop ---------------------------------------------------------------------------
    def run_once(self, watermark_ms: int) -> int:
        """Load due slots, deliver what is due; units handled (0: nothing to do now)."""
        now_ms = self._clock.now_ms()
        work = self._load_slots(now_ms)
        work += self._deliver_due(now_ms, watermark_ms)
        self._complete_slots(watermark_ms)
        self.next_due_ms = self._heap[0][0] if self._heap else None
        self._counters.read_time_ms = self.read_time_ms
        self._counters.active_units = len(self._heap)
        return work

    def waiting_for_watermark(self, now_ms: int, watermark_ms: int) -> bool:
        """Whether a due unit waits only for the enqueue to catch up (the recall gate)."""
        return bool(self._heap) and self._heap[0][0] <= now_ms and self._heap[0][3] > watermark_ms

    def _load_slots(self, now_ms: int) -> int:
        """Load every slot that starts within the lookahead (memory permitting). Loading does
        not wait for the enqueue: units and markers enqueued later join a loaded slot."""
        lookahead_ms = self._config.timer_lookahead_ms
        loaded = 0
        for _ in range(SLOTS_PER_RUN_MAX):
            slot_ms = self.snapshot_time_ms
            if slot_ms > now_ms + lookahead_ms:
                break
            if self.active and len(self._heap) >= self._config.timer_active_units_max:
                break
            slot = self._wheel.get_slot(slot_ms)
            if slot.last_pos != NO_POS:
                active = ActiveSlot(slot_ms, resume_pos=slot.last_pos)
                loaded += self._load_chain(active, collect_markers=True)
                self.active[slot_ms] = active
            self.snapshot_time_ms = slot_ms + self._precision_ms
            if not self.active:
                self.read_time_ms = self.snapshot_time_ms
        return loaded

    def _load_chain(self, active: ActiveSlot, collect_markers: bool) -> int:
        """Walk the slot's chain from ``resume_pos``: push pending units while the memory
        budget lasts; on the first walk also read every DELETE marker of the slot (first: if
        that store call fails, nothing has changed and the next pass walks again)."""
        budget = max(1, self._config.timer_active_units_max - len(self._heap))
        markers: list[tuple[int, int]] = []
        done: list[TimerUnit] = []  # finished before a restart: counted again, so subtracted again
        found: list[tuple[int, TimerUnit]] = []
        resume_pos = NO_POS
        position = active.resume_pos
        while position != NO_POS:
            unit = self._log.read_unit(position)
            if unit is None or self.slot_of(unit.delayed_ms) != active.time_ms:
                if unit is None:
                    log.warning("timer slot %d: chain ends at a missing unit %d", active.time_ms, position)
                break
            if unit.is_delete and not unit.is_roll:
                if collect_markers:
                    markers.append((unit.offset_py, unit.size_py))
            elif unit.state != STATE_DONE:
                if len(found) < budget:
                    found.append((position, unit))
                elif resume_pos == NO_POS:
                    resume_pos = position
                    if not collect_markers:
                        break
            elif collect_markers and not unit.is_delete:
                done.append(unit)
            position = unit.prev_pos
        if markers or done:
            self._read_markers(markers, done, active.time_ms)
        active.resume_pos = resume_pos
        for position, unit in found:
            self._push(active, position, unit, duplicate=unit.state == STATE_DELIVERING)
        return len(found) + len(markers)

    def _read_markers(self, refs: list[tuple[int, int]], done: list[TimerUnit], slot_ms: int) -> None:
        """Learn the slot's recall keys; subtract its units already done from the timing counts
        (by topic hash; a hash no single counted topic has is read from the unit's message)."""
        timing = self._counters.timing
        lookups = list(refs) + [(u.offset_py, u.size_py) for u in done if timing.topic_of_hash(u.topic_hash) is None]
        records = self._store.look_messages(lookups) if lookups else {}
        for offset, _ in refs:
            record = records.get(offset)
            key = record.properties.get(TIMER_DEL_UNIQKEY) if record is not None else None
            if key:
                self.delete_keys[key] = slot_ms
        for unit in done:
            topic = timing.topic_of_hash(unit.topic_hash)
            if topic is None:
                record = records.get(unit.offset_py)
                topic = record.properties.get(REAL_TOPIC) if record is not None else None
            if topic is not None:
                timing.finish(topic, slot_ms)

    def _push(self, active: ActiveSlot, position: int, unit: TimerUnit, duplicate: bool) -> None:
        delayed_ms = unit.delayed_ms
        gate_ms = self.slot_of(delayed_ms) + 1 + self._config.timer_recall_guard_ms
        heapq.heappush(
            self._heap,
            (
                delayed_ms + 1,
                position,
                active.time_ms,
                gate_ms,
                unit.offset_py,
                unit.size_py,
                unit.magic,
                unit.write_time_ms,
                duplicate,
            ),
        )
        active.pending += 1

    def _complete_slots(self, watermark_ms: int) -> None:
        for slot_ms in sorted(self.active):
            active = self.active[slot_ms]
            if active.pending:
                continue
            if active.resume_pos != NO_POS:
                self._load_chain(active, collect_markers=False)
                continue
            # No unit of the slot can arrive after this: later ones go to the read pointer.
            if watermark_ms >= slot_ms + self._precision_ms + 1 + self._config.timer_recall_guard_ms:
                del self.active[slot_ms]
        read_time_ms = min(self.active) if self.active else self.snapshot_time_ms
        if read_time_ms != self.read_time_ms:
            self.read_time_ms = read_time_ms
            expired = [key for key, slot_ms in self.delete_keys.items() if slot_ms < read_time_ms]
            for key in expired:
                del self.delete_keys[key]

    # -- delivery -----------------------------------------------------------------------------
    def _deliver_due(self, now_ms: int, watermark_ms: int) -> int:
        heap = self._heap
        if now_ms < self.next_pass_ms or not heap or heap[0][0] > now_ms or heap[0][3] > watermark_ms:
            return 0
        self.next_pass_ms = now_ms + self._config.timer_delivery_interval_ms
        batch_max = self._config.timer_delivery_batch_messages
        done = 0
        while heap and heap[0][0] <= now_ms and heap[0][3] <= watermark_ms:
            batch: list[Entry] = []
            while heap and len(batch) < batch_max and heap[0][0] <= now_ms and heap[0][3] <= watermark_ms:
                batch.append(heapq.heappop(heap))
            self._deliver_batch(batch)  # StoreError: the batch is back in the heap
            done += len(batch)  # units that fell due meanwhile wait for the next pass: full batches
        return done

    def _deliver_batch(self, batch: list[Entry]) -> None:
        try:
            records = self._store.look_messages([(entry[4], entry[5]) for entry in batch])
        except StoreError:
            for entry in batch:
                heapq.heappush(self._heap, entry)
            raise
        now_ms = self._clock.now_ms()
        out: list[MessageToPut] = []
        sent: list[Entry] = []
        for entry in batch:
            record = records.get(entry[4])
            if record is None or record.store_size_bytes != entry[5]:
                log.warning(
                    "timer unit %d: no record of %d bytes at CommitLog offset %d; dropped", entry[1], entry[5], entry[4]
                )
                self._finish(entry, STATE_DONE, self._timing_topic(entry, None))
                self._counters.dropped += 1
                continue
            message = self._message_for(entry, record, now_ms)
            if message is None:
                continue
            out.append(message)
            sent.append(entry)
        if not out:
            return
        for entry in sent:
            self._log.set_state(entry[1], STATE_DELIVERING)
        try:
            outcomes = put_each_refused(self._store, out)
        except StoreError:
            # The put (or some of the single puts of a refused batch) may have landed: the units
            # stay DELIVERING, and their next delivery counts as a possible duplicate.
            for entry in sent:
                self._forget(entry)
                self._repush(entry, entry[0], duplicate=True)
            raise
        done_ms = self._clock.now_ms()
        counters = self._counters
        for entry, message, outcome in zip(sent, out, outcomes):
            topic = self._timing_topic(entry, records[entry[4]])
            if outcome.status in APPENDED_STATUSES:
                self._finish(entry, STATE_DONE, topic)
                if message.topic == TIMER_TOPIC:
                    counters.rolled += 1
                else:
                    counters.delivered += 1
                    counters.lateness.observe_ms(done_ms - entry[0])
                if entry[8]:
                    counters.duplicates += 1
            elif outcome.status in PERMANENT_FAILURES:
                log.error(
                    "store refused timer message %s for %s-%d: %s %s; dropped",
                    message.properties.get(UNIQ_KEY),
                    message.topic,
                    message.queue_id,
                    outcome.status.name,
                    outcome.error,
                )
                self._finish(entry, STATE_DONE, topic)
                counters.dropped += 1
            else:
                log.warning(
                    "store did not take timer message %s (%s); retrying in %d ms",
                    message.properties.get(UNIQ_KEY),
                    outcome.status.name,
                    RETRY_DELAY_MS,
                )
                self._log.set_state(entry[1], STATE_PENDING)
                self._forget(entry)
                self._repush(entry, done_ms + RETRY_DELAY_MS, duplicate=entry[8])

    def _message_for(self, entry: Entry, record: StoredMessage, now_ms: int) -> MessageToPut | None:
        """The message to put for a due unit: a roll back into the timer topic, the real
        message, or None (recalled / undeliverable; the unit is finished here)."""
        properties = dict(record.properties)
        if entry[6] & MAGIC_ROLL:
            topic, queue_id = roll_timer(properties, entry[7], now_ms)
            return copy_to(record, topic, queue_id, properties)
        key = delete_key_of(properties)
        if key is not None and key in self.delete_keys:
            self._finish(entry, STATE_DONE, self._timing_topic(entry, record))
            self._counters.recalled += 1
            return None
        destination = unpark_timer(properties, entry[7], now_ms)
        if destination is None:
            log.error("timer message at %d has no REAL_TOPIC/REAL_QID; dropped", record.phy_offset)
            self._finish(entry, STATE_DONE, self._timing_topic(entry, record))
            self._counters.dropped += 1
            return None
        return copy_to(record, destination[0], destination[1], properties)

    def _finish(self, entry: Entry, state: int, topic: str | None) -> None:
        """The unit is done: marked in the TimerLog, off the pending and timing counts."""
        self._log.set_state(entry[1], state)
        self._forget(entry)
        self._counters.pending -= 1
        if topic is not None:
            self._counters.timing.finish(topic, entry[2])

    def _timing_topic(self, entry: Entry, record: StoredMessage | None) -> str | None:
        """The topic a finished unit was counted under (None: a recall marker; no REAL_TOPIC),
        from its message, else (the message is gone) from the unit's topic hash."""
        if entry[6] & MAGIC_DELETE:
            return None
        if record is not None:
            return record.properties.get(REAL_TOPIC)
        unit = self._log.read_unit(entry[1])
        return self._counters.timing.topic_of_hash(unit.topic_hash) if unit is not None else None

    def _forget(self, entry: Entry) -> None:
        active = self.active.get(entry[2])
        if active is not None:
            active.pending -= 1

    def _repush(self, entry: Entry, due_ms: int, duplicate: bool) -> None:
        active = self.active.get(entry[2])
        if active is None:  # cannot happen: a slot with pending units stays active
            active = self.active[entry[2]] = ActiveSlot(entry[2])
        heapq.heappush(self._heap, (due_ms,) + entry[1:8] + (duplicate,))
        active.pending += 1
