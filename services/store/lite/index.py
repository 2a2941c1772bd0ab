"""The lite index: every lite topic's units in one LMDB environment (``<store root>/lite``), the
byte layout in services/domain/format/lite_index_format.py.

Why not a ConsumeQueue file per lite topic (RocketMQ's file LMQ): a million lite topics would be a
million directories and open files, and a start-up that walks them. Why LMDB (the ``lmdb``
package): one memory-mapped B+tree file of sorted keys, so a lite topic's units are one range read;
readers never block the one writer (dispatch); a transaction is atomic, so the units of a batch
and the ``dispatched`` offset that covers them land together; nothing is held in Python objects
per lite topic, so resident memory and start-up time do not grow with their number (the pages of
the file are the OS's cache). RocksDB would do as well for this size; LMDB has no compaction
threads and a smaller, long-stable binding.

It is a cache of the CommitLog like the ConsumeQueues: each unit comes from a record's
``INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET`` properties, dispatch is idempotent (a unit
written twice is the same key and value), and recovery replays the CommitLog from ``dispatched``
(``load``) after dropping units past the CommitLog's end (``truncate``). Transactions are not
fsynced at commit (``sync=False``: LMDB keeps the file consistent, a power loss may take back the
last commits, which the replay redoes); ``flush`` syncs it with the ConsumeQueues.

What a crash leaves: after a process crash (kill -9) every committed transaction is in the page
cache, so the file is whole and the replay from ``dispatched`` completes it. After a power loss or
an OS crash, pages written since the last sync may be lost or torn, which LMDB without a sync per
commit does not survive (a newer meta page may name pages that never reached the disk). The two
are told apart by the kernel's boot id, recorded beside the file when it is opened: an unclean
stop on another boot rebuilds the index from the CommitLog; on the same boot the file is trusted.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import lmdb

from services.domain.format import lite_index_format as fmt
from services.store.model import DispatchRequest

log = logging.getLogger(__name__)

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
_BOOT_ID_NAME = "boot_id"


def boot_id() -> str:
    """The kernel's id of this boot ("" where there is none: then an unclean stop always rebuilds)."""
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class LiteUnit:
    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class LiteQueue:
    lmq: str
    min_offset: int
    max_offset: int  # one past the last unit
    last_store_timestamp_ms: int


class LiteIndex:
    def __init__(self, directory: Path, map_size_bytes: int) -> None:
        self._directory = directory
        self._map_size_bytes = map_size_bytes
        self._env: lmdb.Environment | None = None
        self._write_lock = threading.Lock()  # one writer: dispatch, truncation, removal
        self._dispatched = -1  # covered in memory (maybe not yet written: see flush)

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self, abnormal: bool = False) -> None:
        """Open (or create) the index; after an unclean stop (``abnormal``) on another boot, or
        when the file is damaged, start it empty: the replay rebuilds it from the CommitLog."""
        self._directory.mkdir(parents=True, exist_ok=True)
        current = boot_id()
        marker = self._directory / _BOOT_ID_NAME
        recorded = marker.read_text().strip() if marker.exists() else ""
        if abnormal and (not current or recorded != current) and (self._directory / "data.mdb").exists():
            log.warning(
                "the last stop was not clean and the machine has restarted since (boot id %r, now %r): unsynced "
                "pages of the lite index may be lost or torn; rebuilding it from the CommitLog",
                recorded,
                current,
            )
            self._wipe()
        try:
            self._open_env()
        except lmdb.Error as exc:  # a damaged file: it is a cache, rebuilt from the CommitLog
            log.warning(
                "lite index at %s cannot be opened (%s): rebuilding it from the CommitLog", self._directory, exc
            )
            if self._env is not None:
                self._env.close()
            self._wipe()
            self._open_env()
        marker.write_text(current + "\n")

    def _wipe(self) -> None:
        shutil.rmtree(self._directory)
        self._directory.mkdir(parents=True)

    def _open_env(self) -> None:
        self._env = env = lmdb.open(
            str(self._directory),
            map_size=self._map_size_bytes,
            max_dbs=4,
            sync=False,
            readahead=False,  # random reads of a big file: no read-ahead into the page cache
            meminit=False,
        )
        self._units = env.open_db(b"units")
        self._queues = env.open_db(b"queues")
        self._meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            if txn.get(fmt.COUNTS_KEY, db=self._meta) is None:  # an index from before the counts
                counts: dict[bytes, int] = {}
                for lmq in txn.cursor(db=self._queues).iternext(values=False):
                    parent = fmt.lmq_parent(bytes(lmq))
                    counts[parent] = counts.get(parent, 0) + 1
                for parent, count in counts.items():
                    txn.put(fmt.count_key(parent), fmt.pack_offset(count), db=self._meta)
                txn.put(fmt.COUNTS_KEY, b"1", db=self._meta)

    def _count_locked(self, txn: lmdb.Transaction[bytes], lmq: bytes, delta: int) -> None:
        """Add ``delta`` to the lite topic count of ``lmq``'s parent (in the caller's write transaction)."""
        self._count_parent_locked(txn, fmt.lmq_parent(lmq), delta)

    def _count_parent_locked(self, txn: lmdb.Transaction[bytes], parent: bytes, delta: int) -> None:
        key = fmt.count_key(parent)
        raw = txn.get(key, db=self._meta)
        count = (fmt.unpack_offset(raw) if raw is not None else 0) + delta
        if count > 0:
            txn.put(key, fmt.pack_offset(count), db=self._meta)
        else:
            txn.delete(key, db=self._meta)

    def parent_count(self, parent: str) -> int:
        """Lite topics of the LITE parent holding messages."""
        with self.env.begin(db=self._meta) as txn:
            raw = txn.get(fmt.count_key(parent.encode("utf-8")))
        return fmt.unpack_offset(raw) if raw is not None else 0

    def close(self, flush: bool = True) -> None:
        if self._env is not None:
            if flush:
                self.flush()
            self._env.close()
            self._env = None

    @property
    def is_open(self) -> bool:
        return self._env is not None

    @property
    def env(self) -> lmdb.Environment:
        assert self._env is not None, "LiteIndex.open() first"
        return self._env

    # -- recovery -----------------------------------------------------------------------------
    def load(self, commitlog_min_offset: int, commitlog_end_offset: int) -> int:
        """The CommitLog offset to replay from: ``dispatched``, after dropping units at or past
        ``commitlog_end_offset`` (records recovery cut off); the CommitLog's first offset when
        the index is empty or older than it."""
        with self.env.begin(db=self._meta) as txn:
            raw = txn.get(fmt.DISPATCHED_KEY)
        dispatched = fmt.unpack_offset(raw) if raw is not None else -1
        if dispatched > commitlog_end_offset:
            log.warning(
                "lite index is ahead of the CommitLog (%d > %d): truncating it", dispatched, commitlog_end_offset
            )
            self.truncate(commitlog_end_offset)
            dispatched = commitlog_end_offset
        if dispatched < commitlog_min_offset:
            dispatched = commitlog_min_offset
        self._dispatched = dispatched
        return dispatched

    @property
    def dispatched(self) -> int:
        """Everything before this CommitLog offset is indexed (in memory, not yet synced)."""
        return self._dispatched

    def truncate(self, phy_offset: int) -> int:
        """Drop every unit at or past ``phy_offset`` (a queue's units are in CommitLog order, so
        from each queue's tail); returns how many were dropped."""
        dropped = 0
        with self._write_lock, self.env.begin(write=True) as txn:
            queues = txn.cursor(db=self._queues)
            for lmq, value in list(queues.iternext()):
                low, high, last_ms = fmt.unpack_queue(value)
                new_high = high
                while new_high > low:
                    unit = txn.get(fmt.unit_key(lmq, new_high - 1), db=self._units)
                    if unit is None or fmt.unpack_unit(unit)[0] < phy_offset:
                        break
                    txn.delete(fmt.unit_key(lmq, new_high - 1), db=self._units)
                    new_high -= 1
                    dropped += 1
                if new_high == low:
                    txn.delete(lmq, db=self._queues)  # nothing left: as if never sent
                    self._count_locked(txn, bytes(lmq), -1)
                elif new_high != high:
                    txn.put(lmq, fmt.pack_queue(low, new_high, last_ms), db=self._queues)
            txn.put(fmt.DISPATCHED_KEY, fmt.pack_offset(phy_offset), db=self._meta)
            self._dispatched = min(self._dispatched, phy_offset) if self._dispatched >= 0 else phy_offset
        return dropped

    # -- dispatch (reput's thread) -----------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest]) -> None:
        """Index the lite units among ``requests`` (a reput batch, in CommitLog order)."""
        if not requests:
            return
        end = requests[-1].phy_offset + requests[-1].size
        lite = [r for r in requests if r.lmq]
        if not lite:
            self._dispatched = max(self._dispatched, end)
            return
        with self._write_lock, self.env.begin(write=True) as txn:
            touched: dict[bytes, list[int]] = {}
            new_per_parent: dict[bytes, int] = {}
            put = txn.put
            units = self._units
            for r in lite:
                lmq = r.lmq.encode("utf-8")
                state = touched.get(lmq)
                fresh = False
                if state is None:
                    raw = txn.get(lmq, db=self._queues)
                    fresh = raw is None  # a new lite topic: nothing of it to compare with
                    state = touched[lmq] = [r.lmq_offset, 0, 0] if raw is None else list(fmt.unpack_queue(raw))
                    if fresh:
                        parent = fmt.lmq_parent(lmq)
                        new_per_parent[parent] = new_per_parent.get(parent, 0) + 1
                if r.lmq_offset == 0 and not fresh and state[1] > 0:
                    first = txn.get(fmt.unit_key(lmq, 0), db=units)
                    if first is not None and fmt.unpack_unit(first)[0] != r.phy_offset:  # expired, sent again
                        self._drop_units_locked(txn, lmq)
                        state[:] = [0, 0, 0]
                put(
                    fmt.unit_key(lmq, r.lmq_offset),
                    fmt.pack_unit(r.phy_offset, r.size, r.tags_code, r.store_timestamp_ms),
                    db=units,
                )
                state[1] = max(state[1], r.lmq_offset + 1)
                state[2] = max(state[2], r.store_timestamp_ms)
            for lmq, (low, high, last_ms) in touched.items():
                put(lmq, fmt.pack_queue(low, high, last_ms), db=self._queues)
            for parent, added in new_per_parent.items():
                self._count_parent_locked(txn, parent, added)
            put(fmt.DISPATCHED_KEY, fmt.pack_offset(end), db=self._meta)
        self._dispatched = max(self._dispatched, end)

    def flush(self) -> None:
        """Write ``dispatched`` (batches without lite units move it in memory only) and fsync."""
        env = self._env
        if env is None:
            return
        with self._write_lock:
            if self._dispatched >= 0:
                with env.begin(write=True, db=self._meta) as txn:
                    current = txn.get(fmt.DISPATCHED_KEY)
                    if current is None or fmt.unpack_offset(current) < self._dispatched:
                        txn.put(fmt.DISPATCHED_KEY, fmt.pack_offset(self._dispatched))
        env.sync(True)

    # -- reads --------------------------------------------------------------------------------
    def queue(self, lmq: str) -> LiteQueue | None:
        with self.env.begin(db=self._queues) as txn:
            raw = txn.get(lmq.encode("utf-8"))
        if raw is None:
            return None
        return LiteQueue(lmq, *fmt.unpack_queue(raw))

    def max_offset(self, lmq: str) -> int:
        """One past the last unit (0 for a lite topic never sent to)."""
        queue = self.queue(lmq)
        return queue.max_offset if queue is not None else 0

    def units(self, lmq: str, queue_offset: int, max_count: int) -> list[LiteUnit]:
        """Up to ``max_count`` units from ``queue_offset`` on (the first held one, if it is gone)."""
        prefix = fmt.unit_prefix(lmq.encode("utf-8"))
        out: list[LiteUnit] = []
        with self.env.begin(db=self._units) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix + fmt.pack_offset(max(queue_offset, 0))):
                return out
            for key, value in cursor:
                if not key.startswith(prefix) or len(key) != len(prefix) + 8 or len(out) >= max_count:
                    break
                out.append(LiteUnit(fmt.unit_key_offset(key), *fmt.unpack_unit(value)))
        return out

    def queues(self, after: str = "", limit: int = 1024) -> list[LiteQueue]:
        """Lite queues in name order, after ``after`` (a page of a walk over all of them)."""
        out: list[LiteQueue] = []
        start = after.encode("utf-8")
        with self.env.begin(db=self._queues) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(start):
                return out
            for key, value in cursor:
                if key == start:
                    continue
                out.append(LiteQueue(key.decode("utf-8"), *fmt.unpack_queue(value)))
                if len(out) >= limit:
                    break
        return out

    def iter_queues(self, prefix: str = "", start_after: str = "") -> Iterator[LiteQueue]:
        """The lite queues whose names start with ``prefix``, in name order (after ``start_after``)."""
        after = start_after or prefix
        while True:
            page = self.queues(after)
            for queue in page:
                if not queue.lmq.startswith(prefix):
                    return
                yield queue
            if not page:
                return
            after = page[-1].lmq

    def queue_count(self) -> int:
        with self.env.begin() as txn:
            return int(txn.stat(self._queues)["entries"])

    # -- removal ------------------------------------------------------------------------------
    def remove(self, lmq: str) -> int:
        """Drop a lite topic's units and queue (expiry); returns the units dropped."""
        key = lmq.encode("utf-8")
        with self._write_lock, self.env.begin(write=True) as txn:
            dropped = self._drop_units_locked(txn, key)
            if txn.delete(key, db=self._queues):
                self._count_locked(txn, key, -1)
        return dropped

    def _drop_units_locked(self, txn: lmdb.Transaction[bytes], lmq: bytes) -> int:
        """Delete every unit of ``lmq`` (in the caller's write transaction); how many."""
        prefix = fmt.unit_prefix(lmq)
        dropped = 0
        cursor = txn.cursor(db=self._units)
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix) and len(cursor.key()) == len(prefix) + 8:
                cursor.delete()
                dropped += 1
                if not cursor.key():
                    break
        return dropped
