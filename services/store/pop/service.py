"""PopService: what a consumer group's receive / ack needs, kept in the store (RocketMQ 5 pop).

The broker frontend is stateless: ReceiveMessage becomes ``pop``, AckMessage ``ack``,
ChangeInvisibleDuration ``change_invisible_duration`` and ForwardMessageToDeadLetterQueue
``forward_to_dead_letter_queue`` (what clients expect of them: docs/v2-clients.md). No gRPC here.

Per (group, source topic, queue) the service keeps a ``QueueState``::

    committed  <=  done / in flight / to redeliver  <  cursor  <=  ConsumeQueue max offset

* ``committed`` is the group's offset in consumerOffset.json. It only moves over the
  contiguous prefix of finished offsets (acked, filtered out, revived into the retry topic,
  sent to the DLQ), so every offset not finished lies at or above it: after a restart or a
  failover (all in-flight state is memory; ``forget`` on a role change) the group reads again
  from ``committed`` and every unfinished message is delivered again (at least once).
  Finished offsets above an unfinished one may be delivered again too.
* ``cursor`` (one per requested topic, see the retry queue below) is where the next pop reads;
  it runs ahead of ``committed`` by at most ``POP_WINDOW_OFFSETS_MAX`` offsets.
* A group new to a queue (no committed offset) starts at ``init_offset`` (``consume_init``) and
  commits it at once; a pop with queue id -1 does so on every queue it would scan, also those a
  full batch did not reach (as RocketMQ's getPopOffset), so no queue starts after the first pop.
* A committed offset changed by someone else (``commit_offset``: CommitConsumerOffset, an admin
  reset; a deleted topic) resets the queue's pop state: its in-flight handles die.

Queue id -1 reads every read queue of the topic, then the group's retry topic for it,
``%RETRY%{group}_{topic}`` queue 0 (RocketMQ 5's pop retry topic), round robin from a start
that rotates per (group, topic); each retry record names its original topic in ``RETRY_TOPIC``.
A PRIORITY topic's non-FIFO pops go from its highest queue down, then the retries, for the share
of pops its group's ``priority.factor`` sets (``services/domain/topic_types.py``). A store from
before issue 15 may hold a ``%RETRY%{group}`` topic shared by the group's topics: a pop also
reads it while it exists (one cursor per topic); nothing new is put there.

``pop_lite``: a lite consumer's pop over the LMQs of its lite topics, each FIFO (queue 0).
Filters: ``tags_codes`` (tags hash codes, checked on the ConsumeQueue for the topic's own
queues and on the record for retry copies) and ``sql_expression`` (a SQL92 property filter,
``sql_filter``, evaluated on every record's properties, retry copies included). A message
either filter rejects is finished on the spot, exactly like an acked one.

FIFO pops (``fifo`` or the group's consume_message_orderly) lock the queue for the group while
any popped message of it is in flight. Redelivery after the invisible time (retry topic, FIFO
same offset, DLQ after retry_max_times + 1 deliveries): ``revive``.

Receipt handles (format in ``receipt_handle``) name one delivery: a handle from an earlier
delivery, an earlier change of invisible time or an earlier store process never acks a later one.

Locking: ``_lock`` guards all state. Puts into the retry and DLQ topics happen outside it (a
SYNC flush wait must not stall pops): the entry is ``claimed`` first so no handle can ack it
meanwhile. Order: ``_lock -> topic/group/offset table locks``; the arrival bus is published to
without ``_lock``.

Collaborators are passed in by name, never the store (``ReviveService``, which PopService
starts and owns, also takes the store's ``put_messages``, ``max_offset_in_queue``, arrival bus).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from services.domain.format.commitlog_format import MessageRecord, decode_record, tags_code
from services.domain.format.properties_format import RETRY_TOPIC
from services.domain.lite import LITE_TOPIC_PREFIX, offset_in_queue
from services.domain.sql_filter import compile_sql
from services.domain.statuses import GetStatus
from services.runtime.clock import Clock
from services.store.arrivals import ArrivalBus
from services.store.errors import ServiceNotAvailableError
from services.store.metadata.config_files import SubscriptionGroupConfig, always_writable
from services.store.metadata.consumer_offsets import ConsumerOffsetManager
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.model import decode_message
from services.store.pop.journal import JournalTicket, PopJournal
from services.store.pop.model import AckStatus, PoppedMessage, PopResult, PopStatus
from services.store.pop.queues import PopQueues
from services.store.pop.revive import (
    REVIVE_INTERVAL_MS,
    GetMessages,
    InFlight,
    PutMessages,
    QueueKey,
    ReviveService,
    max_deliveries,
)
from services.store.pop.state import GroupConfigCache, PopRequest, QueueState, check_names, queues_to_scan

log = logging.getLogger(__name__)

POP_BATCH_MAX = 32  # messages per pop (the proxy clamps batch_size to 32)
INVISIBLE_MS_MAX = 24 * 3600 * 1000  # the proxy allows 12 h; the store accepts up to a day
POP_WINDOW_OFFSETS_MAX = 100_000  # cursor - committed per queue (bounds the done set)
POP_READ_ROUNDS_MAX = 64  # get_messages calls per queue per pop
assert POP_BATCH_MAX <= POP_WINDOW_OFFSETS_MAX


class PopService(PopQueues):
    def __init__(
        self,
        *,
        get_messages: GetMessages,
        init_offset: Callable[[str, int], int],
        max_offset_in_queue: Callable[[str, int], int],
        put_messages: PutMessages,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumer_offsets: ConsumerOffsetManager,
        arrivals: ArrivalBus,
        clock: Clock,
        is_running: Callable[[], bool],
        check_writable: Callable[[], None] = always_writable,
        revive_interval_ms: int = REVIVE_INTERVAL_MS,
        journal: PopJournal | None = None,
    ) -> None:
        super().__init__(
            get_messages=get_messages,
            init_offset=init_offset,
            max_offset_in_queue=max_offset_in_queue,
            topics=topics,
            consumer_offsets=consumer_offsets,
            is_running=is_running,
            check_writable=check_writable,
            journal=journal,
        )
        self._clock = clock
        self._rotation: dict[tuple[str, str], int] = {}
        self._group_configs = GroupConfigCache(groups)
        self._revive = ReviveService(
            self,
            put_messages=put_messages,
            topics=topics,
            max_offset_in_queue=max_offset_in_queue,
            arrivals=arrivals,
            clock=clock,
            is_running=is_running,
            interval_ms=revive_interval_ms,
        )

    @property
    def revive(self) -> ReviveService:
        """The redelivery loop (the store starts and stops it with its other services)."""
        return self._revive

    # -- API ------------------------------------------------------------------------------------
    def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        tags_codes: frozenset[int] | None = None,
        fifo: bool = False,
        sql_expression: str = "",
    ) -> PopResult:
        """Up to ``max_count`` (at most 32) messages, invisible to the group for ``invisible_ms``.

        ``sql_expression``: "" for none; a bad one raises ``SqlFilterError`` (a ValueError)."""
        if queue_id < -1:
            raise ValueError(f"queue_id must be -1 (any) or a queue id, not {queue_id}")
        request, config = self._request(group, topic, max_count, invisible_ms, fifo)
        if tags_codes is not None or sql_expression:
            request = replace(
                request, tags_codes=tags_codes, sql=compile_sql(sql_expression) if sql_expression else None
            )
        out: list[PoppedMessage] = []
        examined: list[tuple[str, int]] = []
        with self._lock:
            for source, qid in queues_to_scan(
                self._topics, self._rotation, group, topic, queue_id, request.fifo, config
            ):
                if len(out) >= request.max_count:
                    if (group, source, qid) not in self._queues:
                        self._state_locked((group, source, qid))  # a new group's start, set now
                    continue
                examined.append((source, qid))
                self._pop_queue_locked(request, source, qid, out)
            self._journal_locked()  # not waited for: a delivery is in flight either way
        return PopResult(PopStatus.FOUND if out else PopStatus.NO_MESSAGE, out, examined)

    def pop_lite(
        self, group: str, lmqs: list[str], max_count: int, invisible_ms: int, per_queue_max: int = POP_BATCH_MAX
    ) -> PopResult:
        """Lite topics' queues (LMQ names, queue 0) in order, each FIFO (one batch in flight), at
        most ``per_queue_max`` messages from one. ``examined``: the LMQs looked at; each is now
        locked, empty or was locked: forgotten until announced (an arrival, an ack, an expiry)."""
        if per_queue_max < 1 or not all(lmq.startswith(LITE_TOPIC_PREFIX) for lmq in lmqs):
            raise ValueError(f"per_queue_max must be positive ({per_queue_max}) and every topic an LMQ")
        request, _ = self._request(group, lmqs[0] if lmqs else "", max_count, invisible_ms, True, lmqs[1:])
        out: list[PoppedMessage] = []
        examined: list[tuple[str, int]] = []
        with self._lock:
            for lmq in lmqs:
                if len(out) >= request.max_count:
                    break
                examined.append((lmq, 0))
                taken: list[PoppedMessage] = []
                quota = min(per_queue_max, request.max_count - len(out))
                self._pop_queue_locked(replace(request, topic=lmq, max_count=quota), lmq, 0, taken)
                out.extend(taken)
                if not taken:
                    self._forget_idle_locked((group, lmq, 0))
            self._journal_locked()
        return PopResult(PopStatus.FOUND if out else PopStatus.NO_MESSAGE, out, examined)

    def _request(
        self, group: str, topic: str, max_count: int, invisible_ms: int, fifo: bool, more_topics: Sequence[str] = ()
    ) -> tuple[PopRequest, SubscriptionGroupConfig]:
        self._check_running()
        for name in (topic, *more_topics):
            check_names(group, name)
        if max_count < 1:
            raise ValueError(f"max_count must be positive, not {max_count}")
        if not 0 <= invisible_ms <= INVISIBLE_MS_MAX:
            raise ValueError(f"invisible_ms must be in [0, {INVISIBLE_MS_MAX}], not {invisible_ms}")
        config = self.group_config(group)
        fifo = fifo or config.consume_message_orderly
        now = self._clock.now_ms()
        request = PopRequest(
            group, topic, min(max_count, POP_BATCH_MAX), invisible_ms, None, None, fifo, max_deliveries(config), now
        )
        return request, config

    def ack(self, group: str, topic: str, receipt_handle: str) -> AckStatus:
        return self.ack_many(group, topic, [receipt_handle])[0]

    def ack_many(self, group: str, topic: str, receipt_handles: list[str]) -> list[AckStatus]:
        """``ack`` of each handle, in order, under one lock acquisition."""
        self._check_running()
        statuses: list[AckStatus] = []
        unlocked: list[QueueKey | None] = []
        claimed: list[InFlight] = []
        with self._lock:
            now = self._clock.now_ms()
            for handle in receipt_handles:
                entry = self._find_locked(group, topic, handle, now)
                if entry is None:  # a repeated ack (this request's, or an earlier one) is OK
                    repeat = handle in (e.handle for e in claimed) or self._was_acked_locked(group, handle)
                    statuses.append(AckStatus.OK if repeat else AckStatus.INVALID_RECEIPT_HANDLE)
                    continue
                if self._journal is None:
                    unlocked.append(self._finish_locked(entry))
                    self._remember_finished_locked(group, handle)
                else:
                    entry.claimed = True  # finished once its record is written
                    claimed.append(entry)
                statuses.append(AckStatus.OK)
            ticket = self._journal_finish_locked(claimed)
        if ticket is not None:
            try:
                ticket.wait()  # answered OK only once the ack is as durable as a put
            except ServiceNotAvailableError:
                with self._lock:
                    self._unclaim_locked(claimed)  # not acked: in flight again, redelivered in time
                raise
            with self._lock:
                unlocked += [self._finish_locked(entry, journaled=True) for entry in claimed]
                for entry in claimed:
                    self._remember_finished_locked(group, entry.handle)
        if unlocked:
            self._revive.announce(unlocked)
        return statuses

    def in_flight_counts(self) -> dict[tuple[str, str], int]:
        """(group, source topic) -> deliveries popped and neither acked nor expired yet."""
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for (group, topic, _), state in self._queues.items():
                if state.in_flight:
                    counts[(group, topic)] = counts.get((group, topic), 0) + len(state.in_flight)
        return counts

    def pop_progress(self) -> dict[QueueKey, tuple[int, int]]:
        """(group, source topic, queue) -> (the lowest offset no pop has read yet, FIFO messages
        expired and waiting to be delivered again): what is ready but not handed out."""
        with self._lock:
            return {
                key: (max(min(s.cursors.values(), default=s.committed), s.committed), len(s.redeliver))
                for key, s in self._queues.items()
            }

    def change_invisible_duration(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int, suspend: bool = False
    ) -> tuple[AckStatus, str]:
        """Make the message visible again ``invisible_ms`` from now; the old handle dies.
        ``suspend``: its next delivery from the same offset (FIFO) is not another attempt."""
        self._check_running()
        if not 0 <= invisible_ms <= INVISIBLE_MS_MAX:
            raise ValueError(f"invisible_ms must be in [0, {INVISIBLE_MS_MAX}], not {invisible_ms}")
        now = self._clock.now_ms()
        with self._lock:
            entry = self._find_locked(group, topic, receipt_handle, now)
            if entry is None:
                return AckStatus.INVALID_RECEIPT_HANDLE, ""
            entry.suspended = suspend
            self._issue_locked(entry, now, invisible_ms)
            handle, ticket = entry.handle, self._journal_locked()
        if ticket is not None:
            ticket.wait()
        return AckStatus.OK, handle

    def forward_to_dead_letter_queue(self, group: str, topic: str, receipt_handle: str) -> AckStatus:
        """Put the message into ``%DLQ%{group}`` now, then ack it."""
        self._check_running()
        with self._lock:
            entry = self._find_locked(group, topic, receipt_handle, self._clock.now_ms())
            if entry is None:
                return AckStatus.INVALID_RECEIPT_HANDLE
            entry.claimed = True
            entry.to_dlq = True
        ok = self._revive.move(entry)
        key, ticket = self._settle(entry, ok, retry_at_ms=None)
        self._revive.announce([key])
        if ticket is not None:
            ticket.wait()
        return AckStatus.OK if ok else AckStatus.DLQ_PUT_FAILED

    def group_config(self, group: str, create: bool = True) -> SubscriptionGroupConfig:
        """The group's config; an unknown group is created with defaults (RocketMQ's
        autoCreateSubscriptionGroup), or with ``create=False`` only assumed to have them."""
        return self._group_configs.get(group, create)

    # -- pop ------------------------------------------------------------------------------------
    def _pop_queue_locked(self, req: PopRequest, source: str, queue_id: int, out: list[PoppedMessage]) -> None:
        key = (req.group, source, queue_id)
        state = self._state_locked(key)
        self._expire_fifo_locked(state, req.now_ms, req.max_deliveries)
        if req.fifo and state.in_flight:
            return  # locked: a popped message of this queue is still in flight for the group
        for offset in sorted(state.redeliver):
            if len(out) >= req.max_count:
                return
            previous = state.redeliver[offset]
            if previous.topic != req.topic:
                continue
            del state.redeliver[offset]
            raw = self._read_raw(source, queue_id, offset)
            if raw is None:
                self._mark_done_locked(state, offset)  # removed by retention meanwhile
                continue
            attempt = previous.delivery_attempt + (0 if previous.suspended else 1)
            self._deliver_locked(req, state, key, offset, raw, previous.topic, attempt, out)
        self._read_new_locked(req, state, key, out)
        self._advance_locked(key, state)

    def _read_new_locked(self, req: PopRequest, state: QueueState, key: QueueKey, out: list[PoppedMessage]) -> None:
        _, source, queue_id = key
        from_retry = source != req.topic
        filter_codes = None if from_retry else req.tags_codes  # the retry queue is filtered here
        for _ in range(POP_READ_ROUNDS_MAX):
            cursor = max(state.cursors.get(req.topic, state.committed), state.committed)
            want = min(req.max_count - len(out), POP_WINDOW_OFFSETS_MAX - (cursor - state.committed))
            if want <= 0:
                return
            result = self._get_messages(source, queue_id, cursor, want, tags_codes=filter_codes)
            status = result.status
            if status is GetStatus.OFFSET_TOO_SMALL:
                self._skip_to_locked(key, state, result.min_offset)
                continue
            if status is GetStatus.OFFSET_OVERFLOW_BADLY:
                log.warning(
                    "%s: offset %d is beyond the queue's max %d; resetting to it", key, cursor, result.max_offset
                )
                self._reset_locked(key, state, result.max_offset, commit=True)
                return
            if status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                return  # caught up, or an empty / unknown queue
            returned: set[int] = set()
            for raw in result.raw_messages:
                rec = decode_record(raw, 0, len(raw), check_crc=False, read_body=False)
                assert isinstance(rec, MessageRecord)  # a read returns messages, never a blank record
                offset = offset_in_queue(rec.queue_offset, rec.properties, source)
                returned.add(offset)
                topic = rec.properties.get(RETRY_TOPIC, source) if from_retry else source
                if topic != req.topic:
                    continue  # another topic's retry: left for that topic's cursor
                if offset in state.done or offset in state.in_flight or offset in state.redeliver:
                    continue
                if (from_retry and req.tags_codes is not None and tags_code(rec) not in req.tags_codes) or (
                    req.sql is not None and not req.sql.matches(rec.properties)
                ):
                    self._mark_done_locked(state, offset)  # filtered out: finished like an ack
                    continue
                self._deliver_locked(req, state, key, offset, raw, topic, rec.reconsume_times + 1, out)
            for offset in range(cursor, result.next_begin_offset):
                if offset not in returned and offset not in state.in_flight and offset not in state.redeliver:
                    self._mark_done_locked(state, offset)  # tag did not match (acked), or removed
            state.cursors[req.topic] = result.next_begin_offset
            if result.next_begin_offset >= result.max_offset or result.next_begin_offset == cursor:
                return

    def _deliver_locked(
        self,
        req: PopRequest,
        state: QueueState,
        key: QueueKey,
        offset: int,
        raw: bytes,
        topic: str,
        attempt: int,
        out: list[PoppedMessage],
    ) -> None:
        entry = InFlight(key, offset, topic, req.fifo, attempt, "", 0, 0, 0, 0)
        state.in_flight[offset] = entry
        self._issue_locked(entry, req.now_ms, req.invisible_ms)
        out.append(PoppedMessage(raw, topic, key[1], key[2], offset, attempt, entry.handle))

    def _read_raw(self, source: str, queue_id: int, offset: int) -> bytes | None:
        result = self._get_messages(source, queue_id, offset, 1)
        if result.status is not GetStatus.FOUND:
            return None
        raw = result.raw_messages[0]
        rec = decode_message(raw, read_body=False)
        return raw if offset_in_queue(rec.queue_offset, rec.properties, source) == offset else None

    def read_record(self, entry: InFlight) -> MessageRecord | None:
        """The record an in-flight entry names; None if retention removed it."""
        _, source, queue_id = entry.key
        raw = self._read_raw(source, queue_id, entry.queue_offset)
        return None if raw is None else decode_message(raw)

    # -- revive hooks (revive.ReviveService) --------------------------------------------------
    def take_due(self, now_ms: int) -> tuple[list[InFlight], list[QueueKey]]:
        """Claim the entries whose revive time passed: (entries to re-put, FIFO queues unlocked).
        An expired FIFO entry with deliveries left is only moved to ``redeliver`` (no put)."""
        work: list[InFlight] = []
        unlocked: list[QueueKey] = []
        with self._lock:
            for revive_at, sequence, key, offset in self._schedule.pop_due(now_ms):
                state = self._queues.get(key)
                if state is None:
                    continue  # the queue's state was dropped (reset, forgotten): a stale heap item
                entry = state.in_flight.get(offset)
                if entry is None or entry.sequence != sequence or entry.revive_at_ms != revive_at or entry.claimed:
                    continue  # acked, changed, reset or already claimed: a stale heap item
                deliveries_max = max_deliveries(self.group_config(entry.group, create=False))
                if entry.fifo and entry.delivery_attempt < deliveries_max:
                    del state.in_flight[offset]
                    state.redeliver[offset] = entry
                    if not state.in_flight:
                        unlocked.append(key)
                    continue
                entry.claimed = True
                entry.to_dlq = entry.delivery_attempt >= deliveries_max
                work.append(entry)
        return work, unlocked

    def settle(self, entry: InFlight, ok: bool, retry_at_ms: int | None) -> QueueKey | None:
        """After a claimed entry's put: done if ``ok``, else unclaimed (and revived again at
        ``retry_at_ms`` if given). Returns the FIFO queue it unlocked, if any."""
        return self._settle(entry, ok, retry_at_ms)[0]

    def _settle(
        self, entry: InFlight, ok: bool, retry_at_ms: int | None
    ) -> tuple[QueueKey | None, JournalTicket | None]:
        with self._lock:
            if ok:
                return self._finish_locked(entry), self._journal_locked()
            entry.claimed = False
            entry.to_dlq = False
            if retry_at_ms is not None:
                entry.revive_at_ms = retry_at_ms
            state = self._queues.get(entry.key)
            if state is not None and state.in_flight.get(entry.queue_offset) is entry:
                self._schedule.push(entry)
            return None, None
