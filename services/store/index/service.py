"""IndexService: the files of ``index/``; builds the index on dispatch and answers queries.

Format and quirks: see index_file.py (one file) and services/domain/format/index_format.py (bytes)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from services.domain.format.commitlog_format import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
)
from services.domain.format.index_format import (
    HASH_ASCII_UNITS_MAX,
    HASH_DIGITS_Q31,
    HASH_DIGITS_R31,
    HASH_POW31,
    INDEX_FILE_NAME_LENGTH,
    JAVA_INT_MAX,
    index_file_size_bytes,
    index_key,
    index_key_hash_from_u32,
    java_hash_extend_u32,
)
from services.domain.format.properties_format import KEY_SEPARATOR
from services.runtime.clock import Clock
from services.store.index.batch import NumpyIndexBatch
from services.store.index.index_file import (
    _NP_MIN_RECORDS,
    _PREFIX_CACHE_MAX,
    QUERY_MAX_NUM_DEFAULT,
    IndexFile,
    KeyedRecord,
    _is_index_file_name,
    _Record,
    _store_header,
    index_file_name,
    put_entry,
)

if TYPE_CHECKING:
    from services.store.model import DispatchRequest

log = logging.getLogger(__name__)


class IndexService(NumpyIndexBatch):
    """The files of ``index/``, oldest first; builds the index on dispatch and answers queries.

    ``last_full_end_timestamp`` is the end timestamp of the newest *full* file that has been
    flushed; the store writes it to the checkpoint as index_msg_timestamp, by reading it after
    ``flush()`` or through ``on_index_msg_timestamp`` (called, under the flush lock, whenever it
    changes; it must not call back into this service). It only advances after the full file is
    durable, so an abnormal start never keeps a file that was still being written; ``truncate``
    may lower it.
    """

    def __init__(
        self,
        index_dir: Path,
        hash_slot_num: int,
        index_num_max: int,
        clock: Clock,
        query_max_num: int = QUERY_MAX_NUM_DEFAULT,
        on_index_msg_timestamp: Callable[[int], None] | None = None,
    ) -> None:
        if hash_slot_num <= 0:
            raise ValueError("hash_slot_num must be positive")
        if index_num_max < 2:
            raise ValueError("index_num_max must be at least 2 (entry 0 is never used)")
        # RocketMQ computes sizes and positions in Java int.
        if index_file_size_bytes(hash_slot_num, index_num_max) > JAVA_INT_MAX:
            raise ValueError("index file size must fit a Java int")
        self.index_dir = Path(index_dir)
        self.hash_slot_num = hash_slot_num
        self.index_num_max = index_num_max
        self.query_max_num = query_max_num
        self.last_full_end_timestamp = 0
        self._clock = clock
        self._on_index_msg_timestamp = on_index_msg_timestamp
        self._files: tuple[IndexFile, ...] = ()
        self._full_unflushed: list[IndexFile] = []
        self._prefix_hashes: dict[str, int] = {}
        self._last_name = ""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()

    # -- state -------------------------------------------------------------------------------
    @property
    def files(self) -> tuple[IndexFile, ...]:
        return self._files

    @property
    def max_indexed_phy_offset(self) -> int:
        """Phy offset of the newest indexed record, -1 when nothing is indexed."""
        files = self._files
        if not files:
            return -1
        last = files[-1]
        return last.end_phy_offset if last.end_phy_offset > 0 or last.index_count > 1 else -1

    # -- load --------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> None:
        """Map the files in name order. After an abnormal exit, delete every file whose
        end_timestamp > index_msg_timestamp: re-dispatch rebuilds it."""
        with self._flush_lock, self._lock:
            assert not self._files, "load() on a service that already has files"
            self.last_full_end_timestamp = index_msg_timestamp
            self.index_dir.mkdir(parents=True, exist_ok=True)
            names = sorted(p.name for p in self.index_dir.iterdir() if p.is_file() and _is_index_file_name(p.name))
            files = []
            for name in names:
                path = self.index_dir / name
                try:
                    index_file = IndexFile.open(path, self.hash_slot_num, self.index_num_max)
                except ValueError as exc:
                    log.warning("deleting index file of the wrong size (%s)", exc)
                    path.unlink()
                    continue
                if not last_exit_ok and index_file.end_timestamp_ms > index_msg_timestamp:
                    log.info(
                        "abnormal exit: deleting %r, newer than index_msg_timestamp %d", index_file, index_msg_timestamp
                    )
                    index_file.destroy()
                    continue
                files.append(index_file)
            self._files = tuple(files)
            if names:
                self._last_name = names[-1]

    # -- build -------------------------------------------------------------------------------
    def build_index(
        self, topic: str, keys: str, uniq_key: str, phy_offset: int, store_timestamp_ms: int, sys_flag: int
    ) -> None:
        """``buildIndex`` for one dispatched record: UNIQ_KEY, then each key of ``keys``."""
        with self._lock:
            self._build_batch_py_locked((_Record(topic, keys, uniq_key, phy_offset, store_timestamp_ms, sys_flag),))

    def build_index_batch(self, requests: Sequence[DispatchRequest]) -> None:
        """``build_index`` for each record of ``requests``, in order: the same files, byte for
        byte, and the same skips (ROLLBACK; phy_offset below the last file's end_phy_offset;
        equal to it and already holding the key). Reads only ``topic, keys, uniq_key,
        phy_offset, store_timestamp_ms, sys_flag``; a record without keys changes nothing.

        The lock is taken once per batch. A batch of at least ``_NP_MIN_RECORDS`` records is
        split and hashed with numpy (before the lock) and, in the usual case (after dropping
        ROLLBACK records, phy offsets strictly increase from past the last file's
        end_phy_offset, so nothing is skipped and every key is put in order), put with numpy as
        well, a file at a time. Any other batch (re-dispatch, a small batch, a key holding
        ``\\x01``) runs ``_build_batch_py_locked``: ``build_index``'s loop with the key hash
        inlined, ``put_entry`` for each key and the header fields in locals (a re-dispatch found
        under the lock by the numpy path releases it and takes it again for that loop).

        The 40-byte header is written through the mapping once per file per batch: at the end
        of the batch, before a roll (which pre-sets the new header from it), and before a
        ``_has_entry_locked`` walk (which reads the attributes). The IndexFile attributes
        queries read are up to date at the same points; ``index_count`` (and a first entry's
        begin values) are published as the entries are written, so a concurrent query always
        reaches the older keys (see the module docstring) and may miss the batch's own keys
        until it ends. ``flush``/``close``/``truncate`` take the lock: they never see half a
        batch.

        Crash with a batch half done (the process dies with entries and slots written but the
        header not): on load the header is the previous batch's, so its end_phy_offset is
        lower and recovery, which re-dispatches from the checkpoint (never past it), indexes
        the batch's records again, into the same entry positions. What this does not repair: a
        slot the lost batch pointed at an entry >= the reloaded index_count is taken as empty
        (``prev > index_count``) or as a chain of one (``prev == index_count``) on the re-put,
        so the older entries of that slot in this file drop out of queries. RocketMQ's
        write-through header has the same window for one key, here it is one batch; an OS crash
        can do the same either way (mapped pages reach the disk in any order after a flush).
        """
        if len(requests) >= _NP_MIN_RECORDS and self._build_batch_np(requests):
            return
        with self._lock:
            self._build_batch_py_locked(requests)

    def _build_batch_py_locked(self, requests: Sequence[KeyedRecord]) -> None:
        """build_index over ``requests``: the key hash inlined, each key written by ``put_entry``
        (as ``IndexFile.put_key_hash`` does), the header fields in locals."""
        put = put_entry
        pow31 = HASH_POW31
        digits_r = HASH_DIGITS_R31
        digits_q = HASH_DIGITS_Q31
        ascii_units_max = HASH_ASCII_UNITS_MAX
        transaction_mask = SYSFLAG_TRANSACTION_MASK
        rollback_type = SYSFLAG_TRANSACTION_ROLLBACK_TYPE
        index_num_max = self.index_num_max
        hash_slot_num = self.hash_slot_num
        prefix_hashes = self._prefix_hashes
        last_topic = None
        prefix_hash = 0
        files = self._files
        index_file = files[-1] if files else None
        if index_file is not None:
            (
                mm,
                entries_pos,
                index_count,
                begin_timestamp_ms,
                end_timestamp_ms,
                begin_phy_offset,
                end_phy_offset,
                hash_slot_count,
                reserved_index_end,
            ) = index_file.put_state()
        else:  # no file yet: the first key rolls one (and takes its mapping, ``mm``)
            entries_pos = index_count = begin_timestamp_ms = end_timestamp_ms = 0
            begin_phy_offset = end_phy_offset = hash_slot_count = reserved_index_end = 0
        dirty = False  # the locals hold puts not yet in index_file's attributes and header
        try:
            for req in requests:
                uniq_key = req.uniq_key
                keys = req.keys
                if keys:
                    keys_of_record = keys.split(KEY_SEPARATOR)
                    keys_of_record.insert(0, uniq_key)
                elif uniq_key:
                    keys_of_record = [uniq_key]
                else:
                    continue
                phy_offset = req.phy_offset
                partial = False  # the record's keys may be split over the last file and a lost one
                if index_file is not None:
                    if phy_offset < end_phy_offset:
                        continue  # already indexed (re-dispatch)
                    if phy_offset == end_phy_offset and (end_phy_offset > 0 or index_count > 1):
                        partial = True
                if req.sys_flag & transaction_mask == rollback_type:
                    continue
                topic = req.topic
                if topic != last_topic:
                    cached = prefix_hashes.get(topic)
                    prefix_hash = cached if cached is not None else self._prefix_hash(topic)
                    last_topic = topic
                store_timestamp_ms = req.store_timestamp_ms
                for key in keys_of_record:
                    if not key:
                        continue
                    # -- index_key_hash_from_u32(java_hash_extend_u32(prefix_hash, key)), inlined
                    if key.isascii() and len(key) <= ascii_units_max:
                        units = key.encode()
                        key_hash = (
                            prefix_hash * pow31[len(units)]
                            + int(units.translate(digits_r), 31)
                            + 31 * int(units.translate(digits_q), 31)
                        ) & 0xFFFFFFFF
                    else:
                        key_hash = java_hash_extend_u32(prefix_hash, key)
                    if key_hash >= 0x80000000:
                        key_hash = 0 if key_hash == 0x80000000 else 0x100000000 - key_hash
                    if partial:
                        if dirty:
                            assert index_file is not None  # dirty: a key was put into it
                            _store_header(
                                index_file,
                                begin_timestamp_ms,
                                end_timestamp_ms,
                                begin_phy_offset,
                                end_phy_offset,
                                hash_slot_count,
                                index_count,
                            )
                            dirty = False
                        if self._has_entry_locked(key_hash, phy_offset):
                            continue
                    if index_count >= index_num_max or index_file is None:
                        if dirty:
                            assert index_file is not None  # dirty: a key was put into it
                            _store_header(
                                index_file,
                                begin_timestamp_ms,
                                end_timestamp_ms,
                                begin_phy_offset,
                                end_phy_offset,
                                hash_slot_count,
                                index_count,
                            )
                            dirty = False
                        index_file = self._roll_locked()  # header pre-set from the old file's end
                        (
                            mm,
                            entries_pos,
                            index_count,
                            begin_timestamp_ms,
                            end_timestamp_ms,
                            begin_phy_offset,
                            end_phy_offset,
                            hash_slot_count,
                            reserved_index_end,
                        ) = index_file.put_state()
                    if index_count >= reserved_index_end:  # blocks first (ENOSPC, not SIGBUS)
                        reserved_index_end = index_file.reserve(index_count + 1)
                    if not put(
                        mm,
                        entries_pos,
                        hash_slot_num,
                        index_count,
                        key_hash,
                        phy_offset,
                        store_timestamp_ms,
                        begin_timestamp_ms,
                    ):
                        hash_slot_count += 1  # the slot was empty
                    if index_count <= 1:
                        # First entry: begin values become this message's, after time_diff
                        # used the old ones (a query converts time_diffs with them).
                        index_file.begin_phy_offset = begin_phy_offset = phy_offset
                        index_file.begin_timestamp_ms = begin_timestamp_ms = store_timestamp_ms
                    end_phy_offset = phy_offset
                    end_timestamp_ms = store_timestamp_ms
                    index_count += 1
                    # A query may follow the slot just written (older keys of that slot stay
                    # reachable); the rest of the header is published at the end.
                    index_file.index_count = index_count
                    dirty = True
        finally:
            if dirty:
                assert index_file is not None  # dirty: a key was put into it
                _store_header(
                    index_file,
                    begin_timestamp_ms,
                    end_timestamp_ms,
                    begin_phy_offset,
                    end_phy_offset,
                    hash_slot_count,
                    index_count,
                )

    def _has_entry_locked(self, key_hash: int, phy_offset: int) -> bool:
        """Does a file that may hold this record's keys (newest ones) already have this key?"""
        for index_file in reversed(self._files):
            if index_file.end_phy_offset < phy_offset:
                return False
            if index_file.has_entry(key_hash, phy_offset):
                return True
        return False

    def _prefix_hash(self, topic: str) -> int:
        """The unsigned Java hash of ``topic#``, cached (the cache is a plain dict: a race
        only computes a hash twice)."""
        if len(self._prefix_hashes) >= _PREFIX_CACHE_MAX:
            self._prefix_hashes.clear()
        prefix_hash = java_hash_extend_u32(0, index_key(topic, ""))
        self._prefix_hashes[topic] = prefix_hash
        return prefix_hash

    def _roll_locked(self) -> IndexFile:
        """``getAndCreateLastIndexFile`` when there is no file or the last one is full: the
        new header starts at the previous file's end values."""
        files = self._files
        prev = files[-1] if files else None
        end_phy_offset = prev.end_phy_offset if prev is not None else 0
        end_timestamp_ms = prev.end_timestamp_ms if prev is not None else 0
        self.index_dir.mkdir(parents=True, exist_ok=True)
        name = self._new_file_name_locked()
        index_file = IndexFile.create(
            self.index_dir / name, self.hash_slot_num, self.index_num_max, end_phy_offset, end_timestamp_ms
        )
        self._last_name = name
        self._files = files + (index_file,)
        if prev is not None:
            self._full_unflushed.append(prev)  # flush() makes it durable, then the checkpoint
        log.info("created %r", index_file)
        return index_file

    def _new_file_name_locked(self) -> str:
        """A name from the clock, or, when that would not sort after the newest file's (two
        files in one millisecond, a clock that stepped back), the newest name plus one: names
        only order the files (load sorts them), RocketMQ never parses them."""
        name = index_file_name(self._clock.now_ms())
        if name <= self._last_name:
            name = f"{int(self._last_name) + 1:0{INDEX_FILE_NAME_LENGTH}d}"
        return name

    # -- query -------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """``queryOffset``: phy offsets of ``topic#key`` stored in [begin_ms, end_ms], newest
        file first, at most min(max_num, query_max_num). Contains hash collisions."""
        max_num = min(max_num, self.query_max_num)
        phy_offsets: list[int] = []
        if max_num <= 0:
            return phy_offsets
        key_hash = index_key_hash_from_u32(java_hash_extend_u32(0, index_key(topic, key)))
        for index_file in reversed(self._files):
            if index_file.is_time_matched(begin_ms, end_ms):
                try:
                    index_file.select_into(phy_offsets, key_hash, max_num, begin_ms, end_ms)
                except ValueError:
                    pass  # closed by delete/truncate under us
            if index_file.begin_timestamp_ms < begin_ms or len(phy_offsets) >= max_num:
                break
        return phy_offsets

    # -- flush -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Make every rolled-over full file durable (then advance last_full_end_timestamp),
        then the current file. A file whose fdatasync fails stays queued."""
        with self._flush_lock:
            with self._lock:
                full_files, self._full_unflushed = self._full_unflushed, []
                files = self._files
                current = files[-1] if files else None
                for index_file in full_files:
                    index_file.write_header()
                if current is not None:
                    current.write_header()
            synced = 0
            try:
                for index_file in full_files:
                    if not index_file.closed:
                        index_file.sync()
                    synced += 1
            finally:
                if synced < len(full_files):
                    with self._lock:
                        self._full_unflushed[:0] = full_files[synced:]
            if current is not None and not current.closed:
                current.sync()
            end_timestamp = max((f.end_timestamp_ms for f in full_files if not f.closed), default=0)
            if end_timestamp > self.last_full_end_timestamp:
                self._set_last_full_end_timestamp(end_timestamp)

    def _set_last_full_end_timestamp(self, timestamp_ms: int) -> None:
        self.last_full_end_timestamp = timestamp_ms
        if self._on_index_msg_timestamp is not None:
            self._on_index_msg_timestamp(timestamp_ms)

    # -- deletion ----------------------------------------------------------------------------
    def delete_expired_files(self, commitlog_min_offset: int) -> int:
        """``deleteExpiredFile``: delete the leading non-last files whose end_phy_offset <
        commitlog_min_offset. Returns how many were deleted."""
        with self._flush_lock, self._lock:
            files = self._files
            if not files or files[0].end_phy_offset >= commitlog_min_offset:
                return 0
            count = 0
            while count < len(files) - 1 and files[count].end_phy_offset < commitlog_min_offset:
                count += 1
            self._remove_files_locked(files[:count])
            self._files = files[count:]
            return count

    def truncate(self, phy_offset: int) -> int:
        """Drop the index of records at or after ``phy_offset`` (the CommitLog's new end):
        delete, newest first, every file whose end_phy_offset >= phy_offset. Returns
        max_indexed_phy_offset; records after it must be dispatched again."""
        with self._flush_lock, self._lock:
            files = self._files
            keep = len(files)
            while keep > 0 and files[keep - 1].end_phy_offset >= phy_offset:
                keep -= 1
            if keep < len(files):
                log.info("truncate to %d: deleting %d index file(s)", phy_offset, len(files) - keep)
                self._remove_files_locked(files[keep:])
                self._files = files[:keep]
                # The checkpoint must not vouch for files that are gone: fall back to the
                # newest remaining full file that has been flushed.
                durable = [
                    f.end_timestamp_ms for f in files[:keep] if f.is_write_full and f not in self._full_unflushed
                ]
                lowered = min(self.last_full_end_timestamp, max(durable, default=0))
                if lowered != self.last_full_end_timestamp:
                    self._set_last_full_end_timestamp(lowered)
        return self.max_indexed_phy_offset

    def _remove_files_locked(self, doomed: tuple[IndexFile, ...]) -> None:
        for index_file in doomed:
            if index_file in self._full_unflushed:
                self._full_unflushed.remove(index_file)
            index_file.destroy()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Flush everything, then unmap and close every file."""
        self.flush()
        with self._flush_lock, self._lock:
            for index_file in self._files:
                index_file.close()
            self._files = ()

    def destroy(self) -> None:
        """Delete every index file."""
        with self._flush_lock, self._lock:
            self._remove_files_locked(self._files)
            self._files = ()
            self._full_unflushed = []
