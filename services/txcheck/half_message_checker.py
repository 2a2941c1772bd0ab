"""HalfMessageChecker: RocketMQ 5's transaction check pass (``TransactionalMessageServiceImpl.check``)
over the store API, on an injected clock. Half messages and op records are read as
``services.domain.contracts.transaction`` defines them.

One pass (``run_once``) walks ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 from the committed half
offset (group ``CID_RMQ_SYS_TRANS``) up to the queue's max offset at the start of the round,
with the op records from the committed op offset on (``op_records.OpTracker``). For half
record ``i``, in order:

1. an op record lists ``i``: resolved, pass it;
2. ``TRANSACTION_CHECK_TIMES`` (after refunds, below) ``>= check_max``, or older than the
   retention, or not a transaction half at all: copy it to ``TRANS_CHECK_MAX_TIME_TOPIC``
   queue 0 (kept, never delivered) and pass it;
3. younger than its immunity (``transaction_timeout_ms``, or
   ``CHECK_IMMUNITY_TIME_IN_SECONDS`` x 1000 if larger): with that property, push it back (re-append
   it with ``TRAN_PREPARED_QUEUE_OFFSET`` = its first offset) and pass it, so one long immunity
   does not hold the queue; without it, stop the pass here (later halves are younger);
4. otherwise read the op records written meanwhile; still unresolved: re-append it with
   ``TRANSACTION_CHECK_TIMES`` + 1 (this copy carries the count and is what the next pass
   examines), commit ``i + 1``, then ask the brokers to relay a check to a producer of its
   ``PGROUP`` (``Producers.check``).

Age is ``now - min(born, store timestamp)``: copies keep the original's born timestamp, so a
copy is due again at the next pass (RocketMQ re-checks every ``check_interval``), and a
producer clock running ahead cannot make a half look young forever. A check copy stored less
than half a ``check_interval_ms`` ago stops the pass like a young half: only an early pass
(a retry after a failure) meets one, since passes are an interval apart; the half interval
leaves room for a store clock running a little ahead of txcheck's.

No producer connected (or no broker reachable): the copy was appended with the count already
incremented; its offset is remembered ("refund") and the next examination of that copy counts
one check less, so such a transaction is asked again every pass and never reaches
``check_max`` for lack of a producer (a deliberate difference: RocketMQ counts the attempt).
Refunds live in memory: a restart forgets them, costing at most one counted check per restart.

Progress: the half offset is committed right after every record the checker appended (check
copy, push-back, max-time copy) and at the end of the pass; the op offset at the end, to
``OpTracker.next_op_offset(half offset)``. Crash safety (see README): every record at or
after the committed half offset is examined again after a restart; a copy appended before a
crash at most duplicates one check; op records listing unpassed halves are never skipped.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import OrderedDict
from typing import TypeVar

from services.domain.contracts.transaction import QUEUE_ID, Half, read_half
from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_COMMIT_TYPE, SYSFLAG_TRANSACTION_MASK
from services.domain.format.properties_format import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    UNIQ_KEY,
)
from services.domain.names import TRANS_CHECK_GROUP, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.runtime.clock import Clock
from services.store.client.errors import StoreError
from services.store.client.model import MessageToPut, PutOutcome, StoredMessage, copy_to
from services.txcheck.config import TxCheckConfig
from services.txcheck.model import CheckOutcome, CheckRequest, Producers, TxCheckStats, TxStore
from services.txcheck.op_records import OpTracker

log = logging.getLogger(__name__)

RESULTS = ("commit", "rollback", "unknown")
RESOLUTION_LOOKUP_MAX = 32  # records of the real topic looked at to tell a commit from a rollback


class _Step(enum.Enum):
    PASSED = "passed"  # the record is handled; go on with the next one
    STOP = "stop"  # a young record: the pass ends here


Value = TypeVar("Value")


class _Bounded(OrderedDict[int, Value]):
    """Insertion-ordered; forgets the oldest entries beyond ``capacity``."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self._capacity = capacity

    def add(self, key: int, value: Value) -> None:
        self[key] = value
        while len(self) > self._capacity:
            self.popitem(last=False)


class _HalfReader:
    """Reads the half queue in batches; ``at(i)`` -> (record or None, where to go next)."""

    def __init__(self, store: TxStore, batch: int) -> None:
        self._store = store
        self._batch = batch
        self._records: dict[int, StoredMessage] = {}
        self._next = -1  # read position after the cached batch

    def at(self, offset: int) -> tuple[StoredMessage | None, int]:
        record = self._records.get(offset)
        if record is not None:
            return record, offset + 1
        page = self._store.get_messages(TRANS_HALF_TOPIC, QUEUE_ID, offset, self._batch)
        self._records = {r.queue_offset: r for r in page.messages}
        record = self._records.get(offset)
        if record is not None:
            return record, offset + 1
        later = [o for o in self._records if o > offset]
        return None, min(later) if later else page.next_begin_offset


class HalfMessageChecker:
    def __init__(self, config: TxCheckConfig, store: TxStore, producers: Producers, clock: Clock) -> None:
        self._config = config
        self._store = store
        self._producers = producers
        self._clock = clock
        self._lock = threading.Lock()  # guards the counters for stats()
        self._counts: dict[str, int] = {}
        self._results = dict.fromkeys(RESULTS, 0)
        self._offsets = (0, 0, 0, 0)  # half offset, half max, op offset, op max
        self._checked: _Bounded[tuple[str, str]] = _Bounded(
            config.tracked_copies_max
        )  # copy offset -> (topic, transaction id)
        self._refunds: _Bounded[bool] = _Bounded(
            config.tracked_copies_max
        )  # copy offset -> True: its check reached nobody
        self._round_end: int | None = None  # the half max offset the current round stops at
        self.round_complete = True  # False: the last pass hit its budget; run again at once

    # -- the pass ---------------------------------------------------------------------------------
    def run_once(self) -> int:
        """One pass; the number of half records handled. StoreError if the store fails
        (the progress made before is committed when the store still takes it)."""
        try:
            handled = self._pass()
        except StoreError:
            self._count("pass_failures")
            raise
        self._count("passes")
        return handled

    def _pass(self) -> int:
        config, store = self._config, self._store
        started_s = self._clock.monotonic_s()
        now_ms = self._clock.now_ms()
        half_min, half_max = store.queue_offsets(TRANS_HALF_TOPIC, QUEUE_ID)
        op_min, op_max = store.queue_offsets(TRANS_OP_HALF_TOPIC, QUEUE_ID)
        half_offset = max(store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, QUEUE_ID), half_min)
        op_offset = max(store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, QUEUE_ID), op_min)
        if half_offset > half_max or op_offset > op_max:
            # The store lost a queue tail it had dispatched: records now written there would
            # never be read. Start over from the queues' beginnings (the op records settle what
            # was settled; at worst some open transactions are asked again).
            log.warning(
                "committed offsets (half %d, op %d) beyond the queues' ends (%d, %d): rescanning",
                half_offset,
                op_offset,
                half_max,
                op_max,
            )
            half_offset, op_offset = half_min, op_min
            store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, QUEUE_ID, half_offset)
            store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, QUEUE_ID, op_offset)
        if self.round_complete or self._round_end is None:
            self._round_end = half_max
        end = self._round_end
        tracker = OpTracker(op_offset, floor=half_offset)
        reader = _HalfReader(store, config.read_batch_max)
        committed = [half_offset, op_offset]
        # Not complete unless the loop ends by itself: a pass cut short by its budget or by a
        # store failure is continued up to the same end, so copies it appended wait a round.
        i, handled, complete = half_offset, 0, False
        try:
            self._read_ops(tracker)
            while True:
                if i >= end:
                    complete = True
                    break
                if (
                    handled >= config.pass_halves_max
                    or (self._clock.monotonic_s() - started_s) * 1000 >= config.pass_duration_max_ms
                ):
                    break
                if tracker.is_resolved(i):
                    self._on_resolved(i)
                    i, handled = i + 1, handled + 1
                    continue
                record, next_offset = reader.at(i)
                if record is None:
                    if next_offset <= i:
                        complete = True
                        break  # nothing there (yet)
                    i = next_offset  # removed by retention: nothing to check
                    continue
                if self._examine(record, tracker, now_ms, committed) is _Step.STOP:
                    complete = True
                    break
                i, handled = i + 1, handled + 1
        finally:
            self.round_complete = complete
            self._finish(i, tracker, committed, half_max, op_max)
        return handled

    def _finish(self, half_offset: int, tracker: OpTracker, committed: list[int], half_max: int, op_max: int) -> None:
        """Commit the pass's progress: the half offset first, then the op offset it allows."""
        op_offset = tracker.next_op_offset(half_offset)
        try:
            if half_offset != committed[0]:
                self._store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, QUEUE_ID, half_offset)
                committed[0] = half_offset
            if op_offset > committed[1]:
                self._store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, QUEUE_ID, op_offset)
                committed[1] = op_offset
        except StoreError:
            log.warning("could not commit the transaction check progress (half %d, op %d)", half_offset, op_offset)
        with self._lock:
            self._offsets = (committed[0], max(half_max, committed[0]), committed[1], max(op_max, committed[1]))

    def _read_ops(self, tracker: OpTracker) -> None:
        """Every op record from the tracker's read position to the op queue's end."""
        while True:
            page = self._store.get_messages(
                TRANS_OP_HALF_TOPIC, QUEUE_ID, tracker.read_offset, self._config.read_batch_max
            )
            for record in page.messages:
                if record.queue_offset >= tracker.read_offset:
                    tracker.add(record)
            if page.messages:
                continue
            if page.next_begin_offset <= tracker.read_offset:
                return
            tracker.skip_to(page.next_begin_offset)

    # -- one half record --------------------------------------------------------------------------
    def _examine(self, record: StoredMessage, tracker: OpTracker, now_ms: int, committed: list[int]) -> _Step:
        config = self._config
        props = record.properties
        offset = record.queue_offset
        check_times = _int(props.get(TRANSACTION_CHECK_TIMES), 0)
        if offset in self._refunds:
            check_times = max(0, check_times - 1)
        if TRANSACTION_CHECK_TIMES in props and now_ms - record.store_timestamp_ms < config.check_interval_ms // 2:
            return _Step.STOP  # asked just now (an early pass, e.g. after a failure): wait
        age_ms = now_ms - _reference_ms(record)
        half = read_half(props)
        if check_times >= config.check_max or age_ms > config.half_retention_ms or half is None:
            self._discard(record, check_times, age_ms)
            self._commit_half(offset + 1, committed)
            return _Step.PASSED
        immunity_s = _int(props.get(CHECK_IMMUNITY_TIME_IN_SECONDS), -1)
        immunity_ms = max(config.transaction_timeout_ms, immunity_s * 1000)
        if age_ms < immunity_ms:
            if CHECK_IMMUNITY_TIME_IN_SECONDS not in props:
                return _Step.STOP
            prepared = _int(props.get(TRANSACTION_PREPARED_QUEUE_OFFSET), -1)
            if prepared >= 0 and tracker.is_resolved(prepared):
                self._on_resolved(offset)  # the original is resolved: this push-back copy is done
                return _Step.PASSED
            self._push_back(record, prepared if prepared >= 0 else offset)
            self._commit_half(offset + 1, committed)
            return _Step.PASSED
        self._read_ops(tracker)  # resolutions written since the pass began
        if tracker.is_resolved(offset):
            self._on_resolved(offset)
            return _Step.PASSED
        self._check(record, half, check_times, committed)
        return _Step.PASSED

    def _check(self, record: StoredMessage, half: Half, check_times: int, committed: list[int]) -> None:
        props = record.properties
        if record.queue_offset in self._checked:
            self._count_result("unknown")  # asked last pass, no answer resolved it
            del self._checked[record.queue_offset]
        self._refunds.pop(record.queue_offset, None)
        copy = copy_to(record, TRANS_HALF_TOPIC, QUEUE_ID, {**props, TRANSACTION_CHECK_TIMES: str(check_times + 1)})
        appended = self._append(copy)
        self._commit_half(record.queue_offset + 1, committed)
        outcome = self._producers.check(
            CheckRequest(
                producer_group=half.producer_group,
                topic=half.real_topic,
                message_id=half.message_id,
                transaction_id=half.transaction_id,
                half=_appended(copy, appended, record.store_host),
            )
        )
        if outcome is CheckOutcome.SENT:
            self._count("checks_sent")
            self._checked.add(appended.queue_offset, (half.real_topic, half.transaction_id))
        else:
            self._count("no_producer_retries" if outcome is CheckOutcome.NO_PRODUCER else "broker_unreachable_retries")
            self._refunds.add(appended.queue_offset, True)
            log.info(
                "transaction %s of %s: %s, asking again next pass",
                half.transaction_id,
                half.producer_group,
                outcome.value,
            )

    def _push_back(self, record: StoredMessage, first_offset: int) -> None:
        self._append(
            copy_to(
                record,
                TRANS_HALF_TOPIC,
                QUEUE_ID,
                {**record.properties, TRANSACTION_PREPARED_QUEUE_OFFSET: str(first_offset)},
            )
        )
        self._count("immunity_pushbacks")

    def _discard(self, record: StoredMessage, check_times: int, age_ms: int) -> None:
        """DefaultTransactionalMessageCheckListener.resolveDiscardMsg: keep it, never deliver it."""
        self._append(copy_to(record, TRANS_CHECK_MAX_TIME_TOPIC, QUEUE_ID, dict(record.properties)))
        self._count("moved_to_max_time_topic")
        if record.queue_offset in self._checked:
            self._count_result("unknown")
            del self._checked[record.queue_offset]
        self._refunds.pop(record.queue_offset, None)
        log.warning(
            "half message %s (transaction %s) moved to %s after %d checks, %d s old",
            record.queue_offset,
            record.properties.get(TRANSACTION_ID),
            TRANS_CHECK_MAX_TIME_TOPIC,
            check_times,
            age_ms // 1000,
        )

    def _on_resolved(self, offset: int) -> None:
        self._count("resolved")
        self._refunds.pop(offset, None)
        checked = self._checked.pop(offset, None)
        if checked is not None:
            self._count_result(self._resolution(*checked))

    def _resolution(self, topic: str, transaction_id: str) -> str:
        """commit if the real topic holds the committed record, else rollback (metrics only)."""
        try:
            records = self._store.query_messages_by_key(topic, transaction_id, RESOLUTION_LOOKUP_MAX)
        except StoreError:
            return "unknown"
        committed = any(
            r.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT_TYPE
            and r.properties.get(UNIQ_KEY) == transaction_id
            for r in records
        )
        return "commit" if committed else "rollback"

    def _commit_half(self, offset: int, committed: list[int]) -> None:
        if offset > committed[0]:
            self._store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, QUEUE_ID, offset)
            committed[0] = offset

    def _append(self, message: MessageToPut) -> PutOutcome:
        """Put one record the checker must write; a refusal ends the pass like a failed call."""
        [outcome] = self._store.put_messages([message], allow_system_topics=True)
        if not outcome.ok:
            raise StoreError(f"store refused a {message.topic} record: {outcome.status.name} {outcome.error}")
        return outcome

    # -- stats ------------------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def _count_result(self, result: str) -> None:
        with self._lock:
            self._results[result] += 1

    def stats(self) -> TxCheckStats:
        with self._lock:
            half_offset, half_max, op_offset, op_max = self._offsets
            return TxCheckStats(
                results=tuple(self._results.items()),
                half_offset=half_offset,
                half_max_offset=half_max,
                op_offset=op_offset,
                op_max_offset=op_max,
                **self._counts,
            )


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _reference_ms(record: StoredMessage) -> int:
    """When the transaction began: the born timestamp (kept by every copy), unless it is unset
    or later than the store timestamp (a producer clock running ahead)."""
    born = record.born_timestamp_ms
    return min(born, record.store_timestamp_ms) if born > 0 else record.store_timestamp_ms


def _appended(copy: MessageToPut, outcome: PutOutcome, store_host: str) -> StoredMessage:
    """The copy as stored: its offsets and store time from the put, the store host of the original."""
    return StoredMessage(
        topic=copy.topic,
        queue_id=copy.queue_id,
        body=copy.body,
        properties=copy.properties,
        queue_offset=outcome.queue_offset,
        phy_offset=outcome.phy_offset,
        sys_flag=copy.sys_flag,
        flag=copy.flag,
        born_timestamp_ms=copy.born_timestamp_ms,
        born_host=copy.born_host,
        store_timestamp_ms=outcome.store_timestamp_ms,
        store_host=store_host,
        reconsume_times=copy.reconsume_times,
        offset_msg_id=outcome.offset_msg_id,
    )
