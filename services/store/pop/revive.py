"""In-flight deliveries of the pop service and their redelivery: the ``InFlight`` entry, the
schedule of revive times, and ``ReviveService`` (RocketMQ's PopReviveService, without CK/ack
records: the in-flight state lives in ``pop.PopService``). Receipt handles: ``receipt_handle``.

Each ``ReviveService.run_once()`` (every ``REVIVE_INTERVAL_MS`` on its thread; tests call it
with a ManualClock) claims the in-flight entries whose revive time passed and, per entry:

* FIFO with deliveries left: nothing is written; the offset is delivered again, first, by the
  next pop of its queue (with delivery_attempt + 1). Its queue is published on the arrival bus
  so a parked long poll wakes up.
* non-FIFO with deliveries left: a copy goes to ``%RETRY%{group}_{topic}`` queue 0 (RocketMQ 5's
  pop retry topic; created with one queue on demand) with reconsume_times + 1, ``RETRY_TOPIC`` =
  the topic the group consumed (always set: a legacy shared ``%RETRY%{group}`` queue is routed
  by it), ``ORIGIN_MESSAGE_ID`` = the first record's offset message id (if absent);
  body, flag, TAGS, KEYS, UNIQ_KEY and user properties are kept, transaction bits dropped.
* delivery_attempt >= retry_max_times + 1: a copy goes to ``%DLQ%{group}`` queue 0 (one queue,
  created on demand, consumable like any topic) with ``DLQ_ORIGIN_TOPIC`` = original topic,
  ``DLQ_ORIGIN_MESSAGE_ID`` = UNIQ_KEY (else the offset message id) and reconsume_times =
  deliveries made.

Only after the put succeeded is the original offset finished (its committed offset may move
past it), so a crash in between delivers the message again rather than losing it. A failed
put (store stopping, disk full) is retried ``REVIVE_RETRY_DELAY_MS`` later.

What revive uses is named, never the store: the pop state as an ``InFlightTable``, the store's
``put_messages`` and ``max_offset_in_queue``, the topic table, the arrival bus, the clock and
whether the store runs.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_MASK, MessageRecord
from services.domain.format.properties_format import (
    DLQ_ORIGIN_MESSAGE_ID,
    DLQ_ORIGIN_TOPIC,
    FIRST_POP_TIME,
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
)
from services.domain.names import dlq_topic, pop_retry_topic
from services.domain.statuses import PutStatus
from services.runtime.clock import Clock
from services.store.arrivals import ArrivalBus
from services.store.log.flush import _Loop
from services.store.metadata.config_files import SubscriptionGroupConfig, TopicConfig
from services.store.metadata.topic_config import TopicConfigManager
from services.store.model import Arrival, GetResult, PutResult

log = logging.getLogger(__name__)

REVIVE_INTERVAL_MS = 1_000  # RocketMQ reviveInterval
REVIVE_RETRY_DELAY_MS = 5_000  # after a failed retry / DLQ put
REVIVE_BATCH_MAX = 1_024  # entries re-put per run_once (the rest wait for the next run)
SCHEDULE_COMPACT_MIN = 4_096  # rebuild the revive heap when it outgrows 4x its last size

SYSTEM_QUEUE_NUMS = 1  # %RETRY% and %DLQ% topics: one queue (retryQueueNums)

_PUT_WRITTEN = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT)  # appended either way


QueueKey = tuple[str, str, int]  # (group, source topic, queue id)


class Finishing(Protocol):
    """The journal ticket of an ack under way (pop/journal.py ``JournalTicket``)."""

    @property
    def failed(self) -> bool: ...


@dataclass(slots=True, eq=False)
class InFlight:
    """One delivery of one offset to a group (also kept, expired, while waiting to redeliver)."""

    key: QueueKey
    queue_offset: int
    topic: str  # original topic
    fifo: bool
    delivery_attempt: int
    handle: str
    sequence: int
    pop_time_ms: int
    invisible_ms: int
    revive_at_ms: int  # when the revive service looks at it (expiry, or a retry)
    claimed: bool = False  # a retry / DLQ put is under way: no handle is valid
    to_dlq: bool = False  # set when claimed: DLQ rather than retry topic
    suspended: bool = False  # a consumer suspended it (ChangeInvisibleDuration suspend): no attempt counted
    incarnation: str = ""  # of the PopService that issued its handle (kept across a journal replay)
    finishing: Finishing | None = None  # an ack's record on its way to the journal (claimed meanwhile)

    @property
    def group(self) -> str:
        return self.key[0]

    @property
    def expire_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


def max_deliveries(config: SubscriptionGroupConfig) -> int:
    """Deliveries before the DLQ: retry_max_times + 1 (17 for a default group)."""
    return max(0, config.retry_max_times) + 1


class ReviveSchedule:
    """In-flight entries by revive time: a heap of (revive_at_ms, sequence, key, offset) with
    lazy deletion. Acks and changes leave stale items behind, which the consumer of
    ``pop_due`` skips (its entry is gone, or has another sequence or revive time); once the heap
    holds 4x as many items as after its last rebuild it is rebuilt from ``live()``.
    Not thread-safe: the owner calls it under its lock."""

    def __init__(self, live: Callable[[], list[InFlight]]) -> None:
        self._live = live
        self._heap: list[tuple[int, int, QueueKey, int]] = []
        self._compact_at = SCHEDULE_COMPACT_MIN

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, entry: InFlight) -> None:
        heapq.heappush(self._heap, (entry.revive_at_ms, entry.sequence, entry.key, entry.queue_offset))
        if len(self._heap) > self._compact_at:
            self._heap = [(e.revive_at_ms, e.sequence, e.key, e.queue_offset) for e in self._live()]
            heapq.heapify(self._heap)
            self._compact_at = max(SCHEDULE_COMPACT_MIN, 4 * len(self._heap))

    def pop_due(self, now_ms: int) -> Iterator[tuple[int, int, QueueKey, int]]:
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            yield heapq.heappop(heap)


def _copy(rec: MessageRecord, topic: str, properties: dict[str, str], reconsume_times: int) -> MessageRecord:
    return MessageRecord(
        topic=topic,
        queue_id=0,
        body=rec.body,
        properties=properties,
        flag=rec.flag,
        sys_flag=rec.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
        born_timestamp_ms=rec.born_timestamp_ms,
        born_host=rec.born_host,
        reconsume_times=reconsume_times,
    )


def retry_copy(
    rec: MessageRecord, group: str, original_topic: str, reconsume_times: int, first_pop_time_ms: int
) -> MessageRecord:
    """The record to put into ``%RETRY%{group}_{original_topic}`` for a redelivery.

    RETRY_TOPIC is always (re)set to the topic the group consumed (a message read from a DLQ
    topic may carry the RETRY_TOPIC of an earlier group): pops route by it."""
    properties = dict(rec.properties)
    properties[RETRY_TOPIC] = original_topic
    properties.setdefault(ORIGIN_MESSAGE_ID, rec.offset_msg_id)
    properties.setdefault(FIRST_POP_TIME, str(first_pop_time_ms))
    return _copy(rec, pop_retry_topic(group, original_topic), properties, reconsume_times)


def dlq_copy(rec: MessageRecord, group: str, original_topic: str, deliveries: int) -> MessageRecord:
    """The record to put into ``%DLQ%{group}``."""
    properties = dict(rec.properties)
    properties[DLQ_ORIGIN_TOPIC] = original_topic
    properties[DLQ_ORIGIN_MESSAGE_ID] = rec.uniq_key or properties.get(ORIGIN_MESSAGE_ID) or rec.offset_msg_id
    return _copy(rec, dlq_topic(group), properties, deliveries)


class InFlightTable(Protocol):
    """What revive needs of the pop state (``pop.PopService``)."""

    def take_due(self, now_ms: int) -> tuple[list[InFlight], list[QueueKey]]: ...
    def settle(self, entry: InFlight, ok: bool, retry_at_ms: int | None) -> QueueKey | None: ...
    def read_record(self, entry: InFlight) -> MessageRecord | None: ...


class GetMessages(Protocol):
    """The store's read by queue offset (``FileStore.get_messages``): the pop engine's reads."""

    def __call__(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4 << 20,
        tags_codes: frozenset[int] | None = None,
    ) -> GetResult: ...


class PutMessages(Protocol):
    """The store's put (``FileStore.put_messages``): revive puts the retry and DLQ copies."""

    def __call__(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> list[PutResult]: ...


class ReviveService(_Loop):
    name = "pop-revive"

    def __init__(
        self,
        pop: InFlightTable,
        *,
        put_messages: PutMessages,
        topics: TopicConfigManager,
        max_offset_in_queue: Callable[[str, int], int],
        arrivals: ArrivalBus,
        clock: Clock,
        is_running: Callable[[], bool],
        interval_ms: int = REVIVE_INTERVAL_MS,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self._pop = pop
        self._put_messages = put_messages
        self._topics = topics
        self._max_offset_in_queue = max_offset_in_queue
        self._arrivals = arrivals
        self._clock = clock
        self._is_running = is_running
        self.revived_total = 0  # copies put into retry topics
        self.dead_lettered_total = 0
        self._dead_lettered: dict[tuple[str, str], int] = {}  # (group, topic consumed) -> DLQ moves
        self._counts_lock = threading.Lock()  # move() runs on the revive thread and on RPC threads

    def run_once(self) -> int:
        """Redeliver everything due now; returns how many entries were handled."""
        if not self._is_running():
            return 0
        now = self._clock.now_ms()
        work, unlocked = self._pop.take_due(now)
        handled = len(unlocked)
        for entry in work[REVIVE_BATCH_MAX:]:
            self._pop.settle(entry, False, retry_at_ms=now)  # next run
        for entry in work[:REVIVE_BATCH_MAX]:
            ok = self.move(entry)
            key = self._pop.settle(entry, ok, retry_at_ms=None if ok else now + REVIVE_RETRY_DELAY_MS)
            if key is not None:
                unlocked.append(key)
            handled += ok
        self.announce(unlocked)
        return handled

    def announce(self, keys: Sequence[QueueKey | None]) -> None:
        """Publish on the arrival bus (long-polling brokers) that FIFO queues unlocked.

        No new message arrived, but a pop of those queues can now return something."""
        now_ms = self._clock.now_ms()
        arrivals = [
            Arrival(key[1], key[2], self._max_offset_in_queue(key[1], key[2]), now_ms)
            for key in dict.fromkeys(keys)
            if key is not None
        ]
        if arrivals:
            self._arrivals.publish(arrivals)

    def move(self, entry: InFlight) -> bool:
        """Put a claimed entry's message into the retry topic or (``entry.to_dlq``) the DLQ.

        True when the entry is finished: the copy is written, or the record is gone."""
        if not self._is_running():
            return False
        rec = self._pop.read_record(entry)
        if rec is None:
            log.warning("pop: %s offset %d was removed before it could be redelivered", entry.key, entry.queue_offset)
            return True
        if entry.to_dlq:
            copy = dlq_copy(rec, entry.group, entry.topic, entry.delivery_attempt)
        else:
            copy = retry_copy(rec, entry.group, entry.topic, entry.delivery_attempt, entry.pop_time_ms)
        if not self._put(copy):
            return False
        if entry.to_dlq:
            with self._counts_lock:
                self.dead_lettered_total += 1
                key = (entry.group, entry.topic)
                self._dead_lettered[key] = self._dead_lettered.get(key, 0) + 1
            log.info(
                "pop: %s offset %d moved to %s after %d deliveries",
                entry.key,
                entry.queue_offset,
                copy.topic,
                entry.delivery_attempt,
            )
        else:
            self.revived_total += 1
        return True

    def dead_lettered_counts(self) -> dict[tuple[str, str], int]:
        """(group, topic consumed) -> messages moved to ``%DLQ%{group}`` since the store started
        (after the last delivery attempt, or ForwardMessageToDeadLetterQueue)."""
        with self._counts_lock:
            return dict(self._dead_lettered)

    def _put(self, copy: MessageRecord) -> bool:
        topics = self._topics
        if topics.get(copy.topic) is None:
            topics.create_or_update(
                TopicConfig(
                    topic_name=copy.topic, read_queue_nums=SYSTEM_QUEUE_NUMS, write_queue_nums=SYSTEM_QUEUE_NUMS
                )
            )
        result = self._put_messages([copy], allow_system_topics=True)[0]
        if result.status not in _PUT_WRITTEN:
            log.warning("pop: put into %s failed: %s %s", copy.topic, result.status.name, result.error)
            return False
        return True
