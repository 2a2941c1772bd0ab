"""The pop journal (issue 30): the pop engine's state changes in the CommitLog, so a new master,
or the same store after a restart, carries on where the last one stopped (byte layout and ops:
services/domain/format/pop_journal_format.py; RocketMQ keeps its pop checkpoints and acks in the
CommitLog the same way, in its revive topic).

* ``PopJournal`` is the writer. ``PopService`` appends ops under its own lock, in the order it
  applies them, and gets a ``JournalTicket``; one thread (``run_once`` drains) puts them in that
  order, many ops per record and many records per put, into ``rmq_sys_POP_JOURNAL`` queue 0. An
  ack (and a change of invisible time, a forward to the DLQ, an offset reset) waits for its
  ticket: it is answered OK only once its record is as durable as a message put with PUT_OK
  (flushed under SYNC flush, confirmed by the SyncStateSet under SYNC_MASTER). A pop does not
  wait: its deliveries are in flight, which a failover may deliver again anyway.
* Every ``SNAPSHOT_EVERY_RECORDS`` records, ``SNAPSHOT_INTERVAL_MS`` after the last snapshot if
  anything was written since, and first thing in each term, the writer asks the pop engine for
  a snapshot of its whole state, written as one batch of ``snap`` parts; each ops record names
  the last snapshot's offset (``sn``), so a replay reads from there, not from the beginning.
* ``read_journal`` is the replay's read: the last record names the snapshot; the records from
  there to the end come back in order (one that does not decode is logged and skipped; what
  retention removed is skipped too: a replay from the middle is still sound, since each op
  states a fact, and what it misses is delivered again from the committed offsets).
* ``LiteOffsetFollower`` is a reput dispatcher that keeps a replica's lite consumer offsets
  (LMDB, not a ``config/`` table) in step while it is not the master: each finished op carries
  the queue's committed offset after it, and each reset its new offset.

Lock order: ``PopService._lock -> PopJournal._cond``; the writer thread never holds ``_cond``
while it calls the pop engine (snapshots) or puts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.domain.format import pop_journal_format as fmt
from services.domain.format.commitlog_format import MessageRecord
from services.domain.format.properties_format import TAGS
from services.domain.lite import LITE_TOPIC_PREFIX
from services.domain.names import POP_JOURNAL_TOPIC
from services.domain.statuses import GetStatus, PutStatus
from services.runtime.clock import Clock
from services.store.errors import ServiceNotAvailableError
from services.store.metadata.config_files import TopicConfig
from services.store.metadata.topic_config import TopicConfigManager
from services.store.model import DispatchRequest, decode_message
from services.store.pop.revive import GetMessages, PutMessages

log = logging.getLogger(__name__)

SNAPSHOT_EVERY_RECORDS = 1_000
SNAPSHOT_INTERVAL_MS = 600_000
RECORD_BYTES_MAX = 1 << 20  # ops per record, and queue images per snapshot part, up to about this
PUT_RECORDS_MAX = 64  # records per put
TICKET_TIMEOUT_S = 30.0  # a put waits its own flush / replication timeouts: this only bounds a stuck writer
READ_BATCH = 32

Item = fmt.Delivery | fmt.Finished | fmt.Reset


class JournalTicket:
    """Done once the records holding an op were put; ``wait`` raises unless PUT_OK."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.status: PutStatus | None = None
        self.error = ""

    @property
    def failed(self) -> bool:
        """Finished, and not PUT_OK (pending: not failed yet)."""
        return self._done.is_set() and self.status is not PutStatus.PUT_OK

    def finish(self, status: PutStatus, error: str = "") -> None:
        self.status, self.error = status, error
        self._done.set()

    def wait(self, timeout_s: float = TICKET_TIMEOUT_S) -> None:
        if not self._done.wait(timeout_s):
            raise ServiceNotAvailableError("the pop journal did not record the change in time")
        if self.status is not PutStatus.PUT_OK:
            raise ServiceNotAvailableError(
                f"the pop journal could not record the change ({self.status.name if self.status else '?'}"
                f"{': ' + self.error if self.error else ''})"
            )


@dataclass(slots=True)
class _Snapshot:
    sequence: int
    images: list[fmt.QueueImage]


@dataclass(slots=True)
class _Pending:
    entries: list[Item | _Snapshot] = field(default_factory=list)
    tickets: list[JournalTicket] = field(default_factory=list)


class PopJournal:
    name = "pop-journal"

    def __init__(self, put_messages: PutMessages, topics: TopicConfigManager, clock: Clock) -> None:
        self._put_messages = put_messages
        self._topics = topics
        self._clock = clock
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._snapshot_offset = fmt.NO_SNAPSHOT
        self._records_since_snapshot = 0
        self._last_snapshot_ms = clock.now_ms()
        self._snapshot_due = True  # the first batch of a term starts with one
        self._take_snapshot: Callable[[], None] = _nothing
        self._stop = threading.Event()
        self._stopped = False  # stop() or halt() ran: appends fail at once
        self._write_lock = threading.Lock()  # one run_once at a time: records go out in order
        self._thread: threading.Thread | None = None
        self.records_written = 0
        self.snapshots_written = 0
        self.failed = False  # the last put failed

    def bind(self, take_snapshot: Callable[[], None]) -> None:
        """The pop engine's ``journal_snapshot`` (it calls ``append_snapshot`` under its lock)."""
        self._take_snapshot = take_snapshot

    # -- what PopService calls, under its lock --------------------------------------------------
    def append(self, items: Sequence[Item]) -> JournalTicket:
        ticket = JournalTicket()
        with self._cond:
            if self._stopped:
                ticket.finish(PutStatus.SERVICE_NOT_AVAILABLE, "the store is stopping")
                return ticket
            self._pending.entries.extend(items)
            self._pending.tickets.append(ticket)
            self._cond.notify()
        return ticket

    def append_snapshot(self, sequence: int, images: list[fmt.QueueImage]) -> None:
        with self._cond:
            self._pending.entries.append(_Snapshot(sequence, images))
            self._cond.notify()

    def idle(self) -> None:
        """This replica stopped being the master: nothing is due until the next term."""
        with self._cond:
            self._snapshot_due = False
            self._records_since_snapshot = 0

    def new_term(self, snapshot_offset: int) -> None:
        """A restore read the journal up to here: the next batch starts with a snapshot."""
        with self._cond:
            self._snapshot_offset = snapshot_offset
            self._snapshot_due = True
            self._cond.notify()

    # -- the writer ----------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then refuse more (the store calls it before it stops serving)."""
        self._join()
        self.run_once()
        self.halt()

    def halt(self) -> None:
        """Stop without writing what is queued (a crash, for tests)."""
        self._join()
        with self._cond:
            self._stopped = True
        self._fail_pending("the store is stopping")

    def _join(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                if not self._pending.entries and not self._snapshot_due_now(False):
                    self._cond.wait(1.0)
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:
                log.exception("pop journal write failed")
            if self.failed:
                self._stop.wait(1.0)  # not the master (any more), or the disk is full: no busy loop

    def _snapshot_due_now(self, pending: bool) -> bool:
        """Only with something to write: a store that never pops writes no journal."""
        if not pending and self._records_since_snapshot == 0:
            return False
        if self._snapshot_due:
            return True
        if self._records_since_snapshot >= SNAPSHOT_EVERY_RECORDS:
            return True
        age = self._clock.now_ms() - self._last_snapshot_ms
        return self._records_since_snapshot > 0 and age >= SNAPSHOT_INTERVAL_MS

    def run_once(self) -> int:
        """Put everything appended so far, in order; returns the records written."""
        with self._write_lock:
            return self._write()

    def _write(self) -> int:
        with self._cond:
            pending_now = bool(self._pending.entries)
        if self._snapshot_due_now(pending_now):
            self._take_snapshot()  # appends a _Snapshot under the pop lock: ordered with the ops
            self._snapshot_due = False
        with self._cond:
            pending, self._pending = self._pending, _Pending()
        if not pending.entries:
            for ticket in pending.tickets:
                ticket.finish(PutStatus.PUT_OK)
            return 0
        written = 0
        status, error = PutStatus.PUT_OK, ""
        for batch in self._batches(pending.entries):
            status, error, count = self._put(batch)
            written += count
            if status is not PutStatus.PUT_OK:
                break
        for ticket in pending.tickets:
            ticket.finish(status, error)
        return written

    def _batches(self, entries: list[Item | _Snapshot]) -> list[list[tuple[str, bytes, bool]]]:
        """The records to put, in order: (tag, body, is the first part of a snapshot), cut into
        puts of at most PUT_RECORDS_MAX records, a snapshot's parts always in one put."""
        records: list[list[tuple[str, bytes, bool]]] = [[]]
        ops: list[fmt.Op] = []
        size = 0

        def close_ops() -> None:
            nonlocal ops, size
            if ops:
                body = fmt.encode_ops(fmt.OpsRecord(self._snapshot_offset, tuple(ops)))
                records[-1].append((fmt.TAG_OPS, body, False))
                ops, size = [], 0
                if len(records[-1]) >= PUT_RECORDS_MAX:
                    records.append([])

        for kind, group in _runs(entries):
            if kind == "snap":
                close_ops()
                for snapshot in group:
                    assert isinstance(snapshot, _Snapshot)
                    parts = _snapshot_parts(snapshot)
                    if records[-1]:
                        records.append([])
                    records[-1].extend((fmt.TAG_SNAPSHOT, body, i == 0) for i, body in enumerate(parts))
                    records.append([])
                continue
            op = _op(kind, group)
            op_size = _estimated_size(op)
            if ops and size + op_size > RECORD_BYTES_MAX:
                close_ops()
            ops.append(op)
            size += op_size
        close_ops()
        return [batch for batch in records if batch]

    def _put(self, batch: list[tuple[str, bytes, bool]]) -> tuple[PutStatus, str, int]:
        if self._topics.get(POP_JOURNAL_TOPIC) is None:
            try:
                self._topics.create_or_update(
                    TopicConfig(topic_name=POP_JOURNAL_TOPIC, read_queue_nums=1, write_queue_nums=1)
                )
            except ServiceNotAvailableError as exc:  # not the master (any more)
                self.failed = True
                return PutStatus.SERVICE_NOT_AVAILABLE, str(exc), 0
        now = self._clock.now_ms()
        messages = [
            MessageRecord(topic=POP_JOURNAL_TOPIC, queue_id=0, body=body, properties={TAGS: tag}, born_timestamp_ms=now)
            for tag, body, _ in batch
        ]
        results = self._put_messages(messages, allow_system_topics=True)
        status = results[0].status if results else PutStatus.PUT_OK
        self.failed = status is not PutStatus.PUT_OK
        if status is PutStatus.PUT_OK:
            self.records_written += len(batch)
            for (tag, _, first), result in zip(batch, results, strict=True):
                if first:
                    self._snapshot_offset = result.queue_offset
                    self._records_since_snapshot = 0
                    self._last_snapshot_ms = now
                    self.snapshots_written += 1
                elif tag == fmt.TAG_OPS:
                    self._records_since_snapshot += 1
        else:
            log.warning("pop journal: put failed: %s %s", status.name, results[0].error if results else "")
            self._snapshot_due = True  # what follows must not lean on a record that may be missing
        return status, results[0].error if results else "", len(batch)

    def _fail_pending(self, reason: str) -> None:
        with self._cond:
            pending, self._pending = self._pending, _Pending()
        for ticket in pending.tickets:
            ticket.finish(PutStatus.SERVICE_NOT_AVAILABLE, reason)


def _nothing() -> None:
    pass


def _runs(entries: list[Item | _Snapshot]) -> list[tuple[str, list[Item | _Snapshot]]]:
    """Consecutive entries of one kind: ("d" | "f" | "r" | "snap", entries)."""
    runs: list[tuple[str, list[Item | _Snapshot]]] = []
    for entry in entries:
        kind = (
            "snap"
            if isinstance(entry, _Snapshot)
            else "d"
            if isinstance(entry, fmt.Delivery)
            else "f"
            if isinstance(entry, fmt.Finished)
            else "r"
        )
        if runs and runs[-1][0] == kind and kind in ("d", "f"):
            runs[-1][1].append(entry)
        else:
            runs.append((kind, [entry]))
    return runs


def _op(kind: str, group: list[Item | _Snapshot]) -> fmt.Op:
    if kind == "r":
        reset = group[0]
        assert isinstance(reset, fmt.Reset)
        return reset
    if kind == "d":
        return tuple(d for d in group if isinstance(d, fmt.Delivery))
    return tuple(f for f in group if isinstance(f, fmt.Finished))


def _estimated_size(op: fmt.Op) -> int:
    """About an op's JSON size, from its names (not encoding it twice): it only cuts records."""
    if isinstance(op, fmt.Reset):
        return 40 + len(op.group) + len(op.source)
    return sum(
        80 + len(item.group) + len(item.source) + (len(item.topic) if isinstance(item, fmt.Delivery) else 0)
        for item in op
    )


def _snapshot_parts(snapshot: _Snapshot) -> list[bytes]:
    """The snapshot's images cut into parts of about RECORD_BYTES_MAX (at least one part)."""
    chunks: list[list[fmt.QueueImage]] = [[]]
    size = 0
    for image in snapshot.images:
        image_size = len(repr(image.encode()))
        if chunks[-1] and size + image_size > RECORD_BYTES_MAX:
            chunks.append([])
            size = 0
        chunks[-1].append(image)
        size += image_size
    parts = len(chunks)
    return [fmt.encode_snapshot(fmt.SnapshotPart(i, parts, snapshot.sequence, tuple(c))) for i, c in enumerate(chunks)]


# -- replay ------------------------------------------------------------------------------------
JournalRecord = fmt.OpsRecord | fmt.SnapshotPart


def read_journal(
    get_messages: GetMessages, max_offset_in_queue: Callable[[str, int], int]
) -> tuple[list[JournalRecord], int]:
    """The journal from the last snapshot on, in order, and the offset of that snapshot."""
    end = max_offset_in_queue(POP_JOURNAL_TOPIC, 0)
    if end <= 0:
        return [], fmt.NO_SNAPSHOT
    last = _read(get_messages, end - 1, 1)
    start = 0
    if last:
        offset, record = last[0]
        start = offset - record.part if isinstance(record, fmt.SnapshotPart) else record.snapshot_offset
    snapshot_offset = start
    records: list[JournalRecord] = []
    offset = max(start, 0)
    while offset < end:
        result = get_messages(POP_JOURNAL_TOPIC, 0, offset, READ_BATCH)
        if result.status is GetStatus.OFFSET_TOO_SMALL:
            log.warning("pop journal: offsets below %d were removed; replaying from there", result.min_offset)
            offset = result.min_offset
            continue
        if result.status is not GetStatus.FOUND or not result.raw_messages:
            break
        for raw in result.raw_messages:
            decoded = _decode(raw)
            if decoded is not None:
                records.append(decoded[1])
        offset = result.next_begin_offset
    return records, snapshot_offset


def _read(get_messages: GetMessages, offset: int, count: int) -> list[tuple[int, JournalRecord]]:
    result = get_messages(POP_JOURNAL_TOPIC, 0, offset, count)
    if result.status is not GetStatus.FOUND:
        return []
    return [d for d in (_decode(raw) for raw in result.raw_messages) if d is not None]


def _decode(raw: bytes) -> tuple[int, JournalRecord] | None:
    rec = decode_message(raw)
    try:
        return rec.queue_offset, fmt.decode(rec.properties.get(TAGS, ""), rec.body)
    except fmt.PopJournalFormatError as exc:
        log.error("pop journal: record at queue offset %d skipped: %s", rec.queue_offset, exc)
        return None


# -- slaves: lite consumer offsets --------------------------------------------------------------
class LiteOffsets(Protocol):
    """What the follower writes (``LiteConsumerOffsets``)."""

    def commit(self, group: str, lmq: str, offset: int) -> None: ...
    def commit_max(self, group: str, lmq: str, offset: int) -> None: ...


class LiteOffsetFollower:
    """A reput dispatcher: while this replica is not the master, the lite offsets the journal
    records reach its LMDB (finished ops: the committed offset after, never moving back; resets
    and snapshot images as they say). The master writes them itself."""

    def __init__(
        self, lite: LiteOffsets, read_record: Callable[[int], MessageRecord | None], is_master: Callable[[], bool]
    ) -> None:
        self._lite = lite
        self._read_record = read_record
        self._is_master = is_master

    def dispatch(self, requests: list[DispatchRequest]) -> None:
        if self._is_master():
            return
        for request in requests:
            if request.topic != POP_JOURNAL_TOPIC:
                continue
            rec = self._read_record(request.phy_offset)
            if rec is None:
                continue
            try:
                record = fmt.decode(rec.properties.get(TAGS, ""), rec.body)
            except fmt.PopJournalFormatError as exc:
                log.error("pop journal: record at %d skipped: %s", request.phy_offset, exc)
                continue
            self.apply(record)

    def apply(self, record: JournalRecord) -> None:
        lite = self._lite
        if isinstance(record, fmt.SnapshotPart):
            for image in record.queues:
                if image.source.startswith(LITE_TOPIC_PREFIX):
                    lite.commit_max(image.group, image.source, image.committed)
            return
        for op in record.ops:
            if isinstance(op, fmt.Reset):
                if op.source.startswith(LITE_TOPIC_PREFIX):
                    lite.commit(op.group, op.source, op.offset)
                continue
            for item in op:
                if isinstance(item, fmt.Finished) and item.source.startswith(LITE_TOPIC_PREFIX):
                    lite.commit_max(item.group, item.source, item.committed)
