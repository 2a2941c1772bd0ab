"""EndTransaction: commit or roll back a half message.

SendMessage parks a TRANSACTION message in ``RMQ_SYS_TRANS_HALF_TOPIC`` (producer.py; the half
message and the op record are ``services.domain.contracts.transaction``'s) and remembers where (``HalfMessageTable``, like the proxy's in-memory transaction table). Then:

* COMMIT: append the half message to its real topic and queue (``REAL_TOPIC``/``REAL_QID``)
  with transaction type COMMIT and ``prepared_transaction_offset`` = the half's phy offset,
  properties as the half's (RocketMQ keeps REAL_TOPIC/REAL_QID/TRAN_MSG on disk), then write
  the op record;
* ROLLBACK: only the op record;
* op record: in ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, listing the half queue offsets it resolves. It
  tells the transaction checker the half is resolved; the checker re-appends unresolved halves,
  so every copy found is listed.
* UNSPECIFIED: nothing (the proxy maps it to UNKNOWN, a no-op).

Stateless: the half is found through the store, never only in memory. ``HalfMessageTable``
(filled by SendMessage and by CheckTransaction) names one copy by CommitLog offset, read at
once without waiting for dispatch; the store's IndexFile (``RMQ_SYS_TRANS_HALF_TOPIC`` +
``__transactionId__``/UNIQ_KEY) finds every copy, also after a broker restart or when the
answer to a check arrives at a broker that never saw the send.

Idempotent (a client commit and a check answer may both arrive): resolutions are
remembered per transaction id with the half copies their op records cover, concurrent ones
for the same id are serialised, and a commit whose record already exists in the real topic
(found through the index, e.g. after a broker restart) is not appended twice. A repeated
resolution only writes an op record for copies the checker appended since (so they are not
checked again), and never a second commit. A half the broker cannot find is
INVALID_TRANSACTION_ID (unless the id was resolved here before: OK).

CheckTransaction (``TransactionCheckRelay``, served on the admin port for services/txcheck):
remember where the checker's half copy is, then hand the check to one live producer of the
half's group: a RecoverOrphanedTransactionCommand on a v2 producer's Telemetry stream, else
CHECK_TRANSACTION_STATE on a classic producer's remoting connection; the producer answers with
EndTransaction (source SERVER_CHECK) / END_TRANSACTION (fromTransactionCheck), handled above.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from services.broker import validation
from services.broker.errors import Code, RequestError, StoreCallError
from services.broker.producer import PUT_STATUS_TO_V2_CODE
from services.broker.put_coalescer import PutSink
from services.domain.contracts.parking import real_destination
from services.domain.contracts.transaction import QUEUE_ID, encode_op, read_half
from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_COMMIT_TYPE, SYSFLAG_TRANSACTION_MASK
from services.domain.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.runtime.clock import Clock
from services.store.client.model import MessageToPut, PutOutcome, StoredMessage

log = logging.getLogger(__name__)

HALF_COPIES_MAX = 32  # half copies looked up per transaction (the checker re-appends at most 15)
LOCK_STRIPES = 64


class Resolution(enum.IntEnum):
    """``apache.rocketmq.v2.TransactionResolution``."""

    TRANSACTION_RESOLUTION_UNSPECIFIED = 0
    COMMIT = 1
    ROLLBACK = 2


@dataclass(frozen=True, slots=True)
class HalfRef:
    topic: str  # the real topic
    phy_offset: int  # of the half record
    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC


class _Bounded(OrderedDict[str, object]):
    """An insertion-ordered dict that forgets its oldest entries beyond ``capacity``."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self._capacity = capacity
        self._lock = threading.Lock()

    def put(self, key: str, value: object) -> None:
        with self._lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self._capacity:
                self.popitem(last=False)

    def lookup(self, key: str) -> object | None:
        with self._lock:
            return self.get(key)


class HalfMessageTable:
    """transaction id -> where SendMessage put its half message (bounded; oldest forgotten)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._table = _Bounded(capacity)

    def remember(self, transaction_id: str, ref: HalfRef) -> None:
        self._table.put(transaction_id, ref)

    def get(self, transaction_id: str) -> HalfRef | None:
        ref = self._table.lookup(transaction_id)
        return ref if isinstance(ref, HalfRef) else None


@dataclass(frozen=True, slots=True)
class _Resolved:
    resolution: Resolution
    covered: frozenset[int]  # half queue offsets listed in the op records written


class TransactionStore(Protocol):
    def look_message(self, phy_offset: int) -> StoredMessage | None: ...
    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]: ...


class TransactionObserver(Protocol):
    """Told of each transaction this broker resolves (the metrics implement it)."""

    def resolved(self, topic: str, commit: bool) -> None:
        """A first COMMIT (``commit``) or ROLLBACK of a transaction of real topic ``topic``,
        after its records are written; a repeated resolution of the same id is not reported."""


class TransactionService:
    def __init__(
        self,
        store: TransactionStore,
        sink: PutSink,
        halves: HalfMessageTable,
        clock: Clock,
        resolved_capacity: int = 100_000,
        observer: TransactionObserver | None = None,
    ) -> None:
        self._store = store
        self._sink = sink
        self._halves = halves
        self._clock = clock
        self._observer = observer
        self._resolved = _Bounded(resolved_capacity)
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def end_transaction(self, topic: str, transaction_id: str, resolution: Resolution, timeout_s: float) -> None:
        validation.validate_topic(topic)
        if validation.is_blank(transaction_id):
            raise RequestError("transaction id cannot be empty", Code.INVALID_TRANSACTION_ID)
        if resolution is Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED:
            return  # "unknown": the checker will ask again
        deadline_s = self._clock.monotonic_s() + timeout_s
        with self._stripes[hash(transaction_id) % LOCK_STRIPES]:
            done = self._resolved.lookup(transaction_id)
            halves = self._find_halves(topic, transaction_id)
            if not halves:
                if isinstance(done, _Resolved):
                    return
                raise RequestError(
                    f"no half message for transaction {transaction_id} of topic {topic}", Code.INVALID_TRANSACTION_ID
                )
            offsets = frozenset(h.queue_offset for h in halves)
            if isinstance(done, _Resolved):
                if done.resolution is not resolution:
                    log.warning(
                        "transaction %s already resolved as %s, ignoring %s",
                        transaction_id,
                        done.resolution.name,
                        resolution.name,
                    )
                if offsets <= done.covered:
                    return
                # Copies the checker appended after the resolution: cover them, commit nothing.
                offsets |= done.covered
                resolution = done.resolution
            elif resolution is Resolution.COMMIT and not self._already_committed(topic, transaction_id, halves):
                self._put(commit_record(max(halves, key=lambda h: h.queue_offset)), deadline_s)
            self._put(op_record(sorted(offsets), self._clock.now_ms()), deadline_s)
            self._resolved.put(transaction_id, _Resolved(resolution, offsets))
        if done is None and self._observer is not None:
            self._observer.resolved(topic, resolution is Resolution.COMMIT)

    def _find_halves(self, topic: str, transaction_id: str) -> list[StoredMessage]:
        found: dict[int, StoredMessage] = {}
        ref = self._halves.get(transaction_id)
        if ref is not None:
            record = self._store.look_message(ref.phy_offset)
            if record is not None and _is_half_of(record, topic, transaction_id):
                found[record.phy_offset] = record
        # Copies re-appended by the checker, or a half sent before this broker (re)started.
        for record in self._store.query_messages_by_key(TRANS_HALF_TOPIC, transaction_id, HALF_COPIES_MAX):
            if _is_half_of(record, topic, transaction_id):
                found[record.phy_offset] = record
        return list(found.values())

    def _already_committed(self, topic: str, transaction_id: str, halves: list[StoredMessage]) -> bool:
        half_offsets = {h.phy_offset for h in halves}
        return any(
            r.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT_TYPE
            and r.prepared_transaction_offset in half_offsets
            for r in self._store.query_messages_by_key(topic, transaction_id, HALF_COPIES_MAX)
        )

    def _put(self, record: MessageToPut, deadline_s: float) -> PutOutcome:
        outcome = self._sink.submit(record).wait(deadline_s - self._clock.monotonic_s())
        if not outcome.ok:
            raise StoreCallError(
                f"store refused the {record.topic} record: {outcome.status.name} {outcome.error}",
                PUT_STATUS_TO_V2_CODE[outcome.status],
            )
        return outcome


def _is_half_of(record: StoredMessage, topic: str, transaction_id: str) -> bool:
    half = read_half(record.properties) if record.topic == TRANS_HALF_TOPIC else None
    return half is not None and half.real_topic == topic and half.transaction_id == transaction_id


def commit_record(half: StoredMessage) -> MessageToPut:
    """The half message, back in its real topic and queue, with transaction type COMMIT."""
    destination = real_destination(half.properties)
    if destination is None:
        raise StoreCallError(f"half message at {half.phy_offset} lacks REAL_TOPIC/REAL_QID")
    real_topic, real_queue_id = destination
    return MessageToPut(
        topic=real_topic,
        queue_id=real_queue_id,
        body=half.body,
        properties=dict(half.properties),
        sys_flag=(half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_COMMIT_TYPE,
        flag=half.flag,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.phy_offset,
    )


def op_record(half_queue_offsets: list[int], now_ms: int) -> MessageToPut:
    """An op record: "these half queue offsets are resolved"."""
    properties, body = encode_op(half_queue_offsets)
    return MessageToPut(
        topic=TRANS_OP_HALF_TOPIC,
        queue_id=QUEUE_ID,
        body=body,
        properties=properties,
        born_timestamp_ms=now_ms,
        allow_system_topic=True,
    )


@dataclass(frozen=True)
class TransactionCheck:
    """One transaction check to hand to a producer (services/txcheck asks; each door writes it in
    its own protocol: v2 RecoverOrphanedTransactionCommand, remoting CHECK_TRANSACTION_STATE)."""

    producer_group: str  # the half's PGROUP (v2 producers' group is the topic name)
    topic: str  # the half's REAL_TOPIC: the message's topic as the producer sees it
    message_id: str  # UNIQ_KEY
    transaction_id: str
    half: StoredMessage  # the checker's copy in RMQ_SYS_TRANS_HALF_TOPIC
    sys_flag: int = 0


class ProducerChannels(Protocol):
    def push_to_producer(self, group: str, command: object) -> str | None: ...


class CheckChannel(Protocol):
    """A classic producer's connection (the remoting door's ``Channel``)."""

    def check_transaction(self, check: TransactionCheck) -> bool:
        """Write the check (oneway); False if the connection is gone."""


class ClassicProducers(Protocol):
    def producer_channels(self, group: str) -> list[tuple[str, CheckChannel]]: ...


class TransactionCheckRelay:
    """CheckTransaction: hand a transaction check to one live producer of the group: a v2
    producer's Telemetry stream first, else a classic producer's connection, in turn."""

    def __init__(
        self,
        producers: ProducerChannels,
        halves: HalfMessageTable,
        v2_command: Callable[[TransactionCheck], object],
        classic: ClassicProducers | None = None,
    ) -> None:
        self._producers = producers
        self._halves = halves
        self._v2_command = v2_command
        self._classic = classic
        self._turn = itertools.count()

    def relay(self, check: TransactionCheck) -> str | None:
        """The client id the check went to; None if no producer of the group is connected."""
        half = check.half
        for what, value in (
            ("producer group", check.producer_group),
            ("transaction id", check.transaction_id),
            ("topic", check.topic),
        ):
            if validation.is_blank(value):
                raise RequestError(f"{what} cannot be empty", Code.BAD_REQUEST)
        if half.phy_offset < 0 or half.queue_offset < 0:
            raise RequestError("the half message's offsets cannot be negative", Code.BAD_REQUEST)
        # The answer reads this copy directly.
        self._halves.remember(check.transaction_id, HalfRef(check.topic, half.phy_offset, half.queue_offset))
        client_id = self._producers.push_to_producer(check.producer_group, self._v2_command(check))
        if client_id is not None or self._classic is None:
            return client_id
        channels = self._classic.producer_channels(check.producer_group)
        start = next(self._turn)
        for i in range(len(channels)):
            client_id, channel = channels[(start + i) % len(channels)]
            if channel.check_transaction(check):
                return client_id
        return None
