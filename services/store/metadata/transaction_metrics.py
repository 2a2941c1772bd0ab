"""Transaction half messages not yet committed or rolled back, per real topic: RocketMQ 5's
``TransactionMetrics`` (the figure behind ``rocketmq_half_messages{topic}``), kept in
``config/transactionMetrics``.

RocketMQ counts in the broker's processors: +1 when SendMessage stores a half, -1 when
EndTransaction commits or rolls one back and when the checker discards one. pyrmq's broker keeps
no state, so the store counts, as a reput ``Dispatcher``: every one of those writes passes
through dispatch. The records below are read back from the CommitLog (a DispatchRequest carries
no properties); nothing else is read.

| record dispatched | effect |
|---|---|
| ``RMQ_SYS_TRANS_HALF_TOPIC``, an original (no ``TRANSACTION_CHECK_TIMES``, no ``TRAN_PREPARED_QUEUE_OFFSET``: the broker refuses both from producers) | opens its transaction (``__transactionId__``) on its ``REAL_TOPIC``: +1. A second original with the same id joins the open one |
| ``RMQ_SYS_TRANS_HALF_TOPIC``, a checker's copy (check, immunity push-back) | joins its open transaction as one more half queue offset; of a transaction not open: nothing |
| ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d`` (a commit or rollback writes one, listing every copy the broker found) | closes the open transaction of each half queue offset it lists: -1 each |
| ``TRANS_CHECK_MAX_TIME_TOPIC`` (the checker's discard) | closes its transaction: -1 |

A commit is counted at its op record, written right after the committed record (a broker that
fails between the two writes the op record when the commit is retried or the checker asks
again), so only these three system topics are read, and a batch without them costs one pass in
C over its topics.

So a transaction counts once, however many copies the checker appends, however many op records
list them and however often it is resolved again. A topic's entry stays, at 0, once its last
transaction closes (RocketMQ keeps it too).

The file, in fastjson's dialect like the other ``config`` files: RocketMQ 5's
``TransactionMetricsSerializeWrapper`` plus two keys of pyrmq's (fastjson ignores unknown keys,
so a RocketMQ broker reads the counts)::

    {"dataVersion":{"counter":N,"stateVersion":0,"timestamp":ms},
     "openTransactions":{"<real topic>":{"<transaction id>":[<half queue offset>,...]}},  pyrmq
     "phyOffset":<the CommitLog offset the figures are valid up to>,                    pyrmq
     "transactionCount":{"<real topic>":{"count":N,"timeStamp":ms}}}

``timeStamp`` is the store time of the record that last changed the count (RocketMQ: the wall
clock at the change). Written every ``transaction_metric_flush_interval_ms`` (RocketMQ's
``transactionMetricFlushInterval``, 10 s) and at shutdown, crash-safely (``metadata``).

Recovery: the figures are a cache of the CommitLog. ``load`` returns ``phyOffset``; the store
dispatches into this counter alone the records from there to where reput restarts, and records
below it that reput dispatches again are skipped, so every record is counted exactly once and the
figures after a crash are exact. A file that is missing, unreadable (``.bak`` first), without
``phyOffset`` (written by RocketMQ), beyond the recovered CommitLog end (it counted records a
crash took back) or below the CommitLog's min offset is dropped, and the figures are rebuilt from
the CommitLog's first record (a transaction whose original half retention already deleted is then
not counted).

Memory: one entry per open transaction and per half copy of it (the checker discards a half after
15 checks; retention bounds the rest).

Locking: ``_persist_lock -> _lock``; ``_lock`` guards the state, taken once per dispatched batch.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.domain.contracts.transaction import decode_op, read_half
from services.domain.format.commitlog_format import MessageRecord
from services.domain.format.properties_format import TRANSACTION_CHECK_TIMES, TRANSACTION_PREPARED_QUEUE_OFFSET
from services.domain.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.runtime.clock import Clock
from services.store.metadata.config_files import (
    DataVersion,
    hashmap_ordered,
    json_int,
    json_object,
    json_str,
    load_with_backup,
    write_atomically,
)
from services.store.metadata.fastjson import Bean, dumps, loads
from services.store.model import DispatchRequest

log = logging.getLogger(__name__)

TRANSACTION_METRICS_FILE = "transactionMetrics"  # BrokerPathConfigHelper.getTransactionMetricsPath
COUNT_TABLE_JAVA_CAPACITY = 2048  # ConcurrentHashMap(1024): tableSizeFor(1024 + 512 + 1)
_READ_TOPICS = frozenset({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
_COPY_MARKERS = (TRANSACTION_CHECK_TIMES, TRANSACTION_PREPARED_QUEUE_OFFSET)
_TOPIC = operator.attrgetter("topic")


@dataclass(slots=True)
class _Count:
    count: int = 0
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class _Loaded:
    phy_offset: int  # -1: not pyrmq's file
    data_version: DataVersion
    counts: dict[str, _Count]
    open_transactions: dict[str, tuple[str, list[int]]]  # transaction id -> (topic, half offsets)


class TransactionMetrics:
    def __init__(self, config_dir: Path, read_record: Callable[[int], MessageRecord | None], clock: Clock) -> None:
        self.path = Path(config_dir) / TRANSACTION_METRICS_FILE
        self._read_record = read_record
        self._clock = clock
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._open: dict[str, tuple[str, list[int]]] = {}  # transaction id -> (real topic, half queue offsets)
        self._transaction_of: dict[int, str] = {}  # half queue offset -> transaction id (open ones only)
        self._counts: dict[str, _Count] = {}
        self._valid_to = 0  # every record below it is counted, none at or after it
        self._changed = False  # counts changed since the last persist
        self._persisted_to = -1
        self._data_version = DataVersion(timestamp_ms=clock.now_ms())

    # -- reading ----------------------------------------------------------------------------
    @property
    def valid_to(self) -> int:
        with self._lock:
            return self._valid_to

    def half_messages(self) -> dict[str, int]:
        """Real topic -> transactions open on it (topics that had one, 0 included)."""
        with self._lock:
            return {topic: c.count for topic, c in self._counts.items()}

    # -- dispatch ---------------------------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest]) -> None:
        """Count the transaction records among ``requests`` (log order); skip what is below
        ``valid_to`` (already counted: reput re-dispatching after a restart)."""
        if not requests:
            return
        last = requests[-1]
        end = last.phy_offset + last.size
        # The usual batch holds no transaction record: tell so at C speed, without a Python loop.
        if _READ_TOPICS.isdisjoint(set(map(_TOPIC, requests))):
            with self._lock:
                self._valid_to = max(self._valid_to, end)
            return
        with self._lock:
            start = self._valid_to
            if end <= start:
                return
            for req in requests:
                if req.phy_offset >= start and req.topic in _READ_TOPICS:
                    record = self._read_record(req.phy_offset)
                    if record is not None:
                        self._apply_locked(record)
            self._valid_to = end

    def _apply_locked(self, record: MessageRecord) -> None:
        props = record.properties
        if record.topic == TRANS_HALF_TOPIC:
            half = read_half(props)
            if half is None:
                return
            known = self._open.get(half.transaction_id)
            if known is not None:
                known[1].append(record.queue_offset)
                self._transaction_of[record.queue_offset] = half.transaction_id
            elif not any(marker in props for marker in _COPY_MARKERS):
                self._open[half.transaction_id] = (half.real_topic, [record.queue_offset])
                self._transaction_of[record.queue_offset] = half.transaction_id
                self._add_locked(half.real_topic, 1, record.store_timestamp_ms)
        elif record.topic == TRANS_OP_HALF_TOPIC:
            for half_offset in decode_op(props, record.body):
                transaction_id = self._transaction_of.get(half_offset)
                if transaction_id is not None:
                    self._close_locked(transaction_id, record.store_timestamp_ms)
        else:  # TRANS_CHECK_MAX_TIME_TOPIC
            half = read_half(props)
            if half is not None:
                self._close_locked(half.transaction_id, record.store_timestamp_ms)

    def _close_locked(self, transaction_id: str, timestamp_ms: int) -> None:
        entry = self._open.pop(transaction_id, None)
        if entry is None:
            return  # closed before (an op record listing another copy, a discard)
        topic, half_offsets = entry
        for half_offset in half_offsets:
            self._transaction_of.pop(half_offset, None)
        self._add_locked(topic, -1, timestamp_ms)

    def _add_locked(self, topic: str, delta: int, timestamp_ms: int) -> None:
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = _Count()
        count.count += delta
        count.timestamp_ms = timestamp_ms
        self._changed = True
        assert count.count >= 0, f"transaction count of {topic} went negative"

    # -- the file ---------------------------------------------------------------------------
    def load(self, commitlog_min_offset: int, commitlog_end_offset: int) -> int:
        """Read the file; returns the CommitLog offset to count from (its ``phyOffset``, or the
        CommitLog's first offset when the file cannot be used: then the figures start empty)."""
        loaded = load_with_backup(self.path, self._decode)
        usable = loaded is not None and commitlog_min_offset <= loaded.phy_offset <= commitlog_end_offset
        if loaded is not None and loaded.phy_offset < 0:
            log.warning("%s has no phyOffset (written by RocketMQ?): recounting from the CommitLog", self.path)
        elif loaded is not None and not usable:
            log.warning(
                "%s is valid up to CommitLog offset %d, outside [%d, %d]: recounting from the CommitLog",
                self.path,
                loaded.phy_offset,
                commitlog_min_offset,
                commitlog_end_offset,
            )
        with self._persist_lock, self._lock:
            if loaded is not None and usable:
                self._open = loaded.open_transactions
                self._counts = loaded.counts
                self._data_version = loaded.data_version
                self._valid_to = loaded.phy_offset
            else:
                self._open, self._counts, self._valid_to = {}, {}, commitlog_min_offset
            self._transaction_of = {o: tid for tid, (_, offsets) in self._open.items() for o in offsets}
            self._changed = False
            self._persisted_to = self._valid_to if usable else -1
            return self._valid_to

    def persist(self) -> bool:
        """Write the file if anything moved since the last write; True if it wrote. A failed
        write is logged and retried next time (the file is a cache: a restart replays more)."""
        with self._persist_lock:
            with self._lock:
                if self._valid_to == self._persisted_to and not self._changed:
                    return False
                if self._changed:
                    self._data_version.next_version(self._clock.now_ms())
                    self._changed = False
                valid_to = self._valid_to
                text = self._encode_locked()
            try:
                write_atomically(self.path, text)
            except OSError as exc:
                log.warning("cannot write %s: %s", self.path, exc)
                return False
            self._persisted_to = valid_to
            return True

    def _encode_locked(self) -> str:
        by_topic: dict[str, dict[str, tuple[int, ...]]] = {}
        for transaction_id, (topic, half_offsets) in self._open.items():
            by_topic.setdefault(topic, {})[transaction_id] = tuple(half_offsets)
        counts = {t: Bean(count=c.count, timeStamp=c.timestamp_ms) for t, c in self._counts.items()}
        return dumps(
            Bean(
                dataVersion=self._data_version.to_bean(),
                openTransactions=by_topic,
                phyOffset=self._valid_to,
                transactionCount=hashmap_ordered(counts, COUNT_TABLE_JAVA_CAPACITY),
            )
        )

    def _decode(self, text: str) -> _Loaded:
        document = json_object(loads(text), TRANSACTION_METRICS_FILE)
        counts = {
            json_str(topic, "transactionCount key"): _Count(
                json_int(json_object(metric, topic).get("count", 0), f"{topic}.count"),
                json_int(json_object(metric, topic).get("timeStamp", 0), f"{topic}.timeStamp"),
            )
            for topic, metric in json_object(document.get("transactionCount") or {}, "transactionCount").items()
        }
        open_transactions: dict[str, tuple[str, list[int]]] = {}
        for topic, transactions in json_object(document.get("openTransactions") or {}, "openTransactions").items():
            for transaction_id, half_offsets in json_object(transactions, topic).items():
                open_transactions[json_str(transaction_id, topic)] = (
                    json_str(topic, "openTransactions key"),
                    [json_int(o, transaction_id) for o in _json_list(half_offsets, transaction_id)],
                )
        phy_offset = json_int(document.get("phyOffset", -1), "phyOffset")
        if phy_offset >= 0:
            _check_counts(counts, open_transactions)
        return _Loaded(
            phy_offset,
            DataVersion.from_json(document.get("dataVersion"), self._clock.now_ms()),
            counts,
            open_transactions,
        )


def _json_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{what}: expected a list, got {type(value).__name__}")
    return list(value)


def _check_counts(counts: dict[str, _Count], open_transactions: dict[str, tuple[str, list[int]]]) -> None:
    """The counts must be the open transactions counted by topic (ValueError: a damaged file)."""
    expected: dict[str, int] = {}
    for topic, _ in open_transactions.values():
        expected[topic] = expected.get(topic, 0) + 1
    for topic in counts.keys() | expected.keys():
        held = counts[topic].count if topic in counts else 0
        if held != expected.get(topic, 0):
            raise ValueError(f"transactionCount of {topic} is {held}, openTransactions hold {expected.get(topic, 0)}")
