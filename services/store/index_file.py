"""IndexFile and IndexService: RocketMQ's ``topic#key`` -> phy offset index, byte for byte.

Layout in ``format/index_format.py``. Files live in ``index/`` and are named by the local time
of their creation, ``yyyyMMddHHmmssSSS`` (taken from the injected clock). Each one is created
sparse (``ftruncate``, never pre-filled) and mapped; every put writes the entry, the slot and
the whole header through the mapping at once, as RocketMQ's write-through setters do.

RocketMQ quirks kept on purpose (they decide the bytes):

* The in-memory ``index_count`` starts at 1 (entry 0 is never used); a fresh file has 0 on
  disk until the first put writes 2 (or a flush writes 1).
* The first put of a file computes time_diff against the header's begin_timestamp *before*
  setting begin_timestamp to its own store time: 0 in a first file (begin 0), but seconds since
  the previous file's end in a rolled file, whose header is pre-set to the previous file's end
  values.
* ``hash_slot_count`` grows only when the slot was empty (or held an out-of-range index).

Where we differ from RocketMQ (documented choices; none changes the layout):

* build_index also skips a record whose phy offset *equals* the last file's end_phy_offset
  once that offset has been indexed (RocketMQ indexes it again), so re-dispatching the last
  record does not duplicate its keys.
* ``truncate(phy_offset)`` deletes, from the newest backwards, every file whose
  end_phy_offset >= phy_offset (its newest entry points at a record that no longer exists).
  Entries of such a file below phy_offset are lost with it; the caller re-dispatches from
  ``max_indexed_phy_offset``. RocketMQ never truncates its index.
* A new file is created when a key does not fit (or there is none), not before the
  already-indexed check as in RocketMQ, so re-dispatching into a full last file leaves no empty
  file behind. The new header is pre-set the same way.
* A file whose size is not the configured size is deleted at load (it is a cache).
* A chain walk is bounded by index_count steps, so a corrupt chain cannot loop forever.

Threads and locks (``_flush_lock -> _lock``):

* ``_lock`` serialises build_index and every change of the file list (roll, load, delete,
  truncate, close). The file list is a tuple replaced on change, never mutated.
* ``query`` takes no lock: it reads the current tuple and walks the mapped files. Entries are
  written before the slot that points at them and ``index_count`` grows last, so a reader
  never follows an index to an unwritten entry. A file closed under a query raises
  ValueError from the closed mapping; the query ends that file's walk (its data is going away).
* ``_flush_lock`` keeps a file from being closed while ``flush`` runs ``fdatasync`` on it
  outside ``_lock`` (the dispatch thread is never blocked by a disk flush).

Invariants: a file's ``1 <= index_count <= index_num_max``; chains strictly decrease
(``prev_index < index``); end_phy_offset and end_timestamp never decrease across files.
"""
from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from services.store.clock import Clock
from services.store.format.commitlog_format import (
    SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_ROLLBACK_TYPE)
from services.store.format.index_format import (
    INDEX_ENTRY, INDEX_FILE_NAME_LENGTH, INDEX_HEADER, INDEX_HEADER_SIZE_BYTES, INDEX_SLOT,
    INDEX_SLOT_SIZE_BYTES, JAVA_INT_MAX, IndexHeader, entry_position, index_file_size_bytes,
    index_key, index_key_hash, index_key_hash_from_u32, java_hash_extend_u32)

log = logging.getLogger(__name__)

QUERY_MAX_NUM_DEFAULT = 64  # maxMsgsNumBatch
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
_PREFIX_CACHE_MAX = 4096  # topics whose ``topic#`` hash is kept

_entry_pack_into = INDEX_ENTRY.pack_into
_entry_unpack_from = INDEX_ENTRY.unpack_from
_slot_pack_into = INDEX_SLOT.pack_into
_slot_unpack_from = INDEX_SLOT.unpack_from
_header_pack_into = INDEX_HEADER.pack_into


def index_file_name(now_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms // 1000)) + f"{now_ms % 1000:03d}"


def _is_index_file_name(name: str) -> bool:
    return len(name) == INDEX_FILE_NAME_LENGTH and name.isdigit()


class IndexFile:
    """One index file: header, slots and entries, mapped read-write.

    Header fields are plain attributes (read-only to callers); the in-memory ``index_count``
    is >= 1 and is the index the next put writes.
    """

    __slots__ = ("path", "hash_slot_num", "index_num_max", "file_size", "begin_timestamp_ms",
                 "end_timestamp_ms", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
                 "index_count", "_fd", "_mm", "_entries_pos")

    def __init__(self, path: Path, hash_slot_num: int, index_num_max: int, fd: int,
                 mm: mmap.mmap) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num_max = index_num_max
        self.file_size = index_file_size_bytes(hash_slot_num, index_num_max)
        self._fd = fd
        self._mm = mm
        self._entries_pos = entry_position(hash_slot_num, 0)
        header = IndexHeader(*INDEX_HEADER.unpack_from(mm, 0))
        self.begin_timestamp_ms = header.begin_timestamp
        self.end_timestamp_ms = header.end_timestamp
        self.begin_phy_offset = header.begin_phy_offset
        self.end_phy_offset = header.end_phy_offset
        self.hash_slot_count = header.hash_slot_count
        # IndexHeader.load reads <= 0 as 1; a count past the end can only be corruption.
        self.index_count = min(max(header.index_count, 1), index_num_max)

    @classmethod
    def create(cls, path: Path, hash_slot_num: int, index_num_max: int, end_phy_offset: int = 0,
               end_timestamp_ms: int = 0) -> IndexFile:
        """A new sparse file; begin/end phy offset and timestamp pre-set to the previous
        file's end values when they are > 0 (written through, like RocketMQ's setters)."""
        file_size = index_file_size_bytes(hash_slot_num, index_num_max)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, file_size)
            mm = mmap.mmap(fd, file_size)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        index_file = cls(path, hash_slot_num, index_num_max, fd, mm)
        if end_phy_offset > 0:
            index_file.begin_phy_offset = index_file.end_phy_offset = end_phy_offset
        if end_timestamp_ms > 0:
            index_file.begin_timestamp_ms = index_file.end_timestamp_ms = end_timestamp_ms
        if end_phy_offset > 0 or end_timestamp_ms > 0:
            # index_count stays 0 on disk until the first put, as in RocketMQ.
            _header_pack_into(mm, 0, index_file.begin_timestamp_ms, index_file.end_timestamp_ms,
                              index_file.begin_phy_offset, index_file.end_phy_offset, 0, 0)
        return index_file

    @classmethod
    def open(cls, path: Path, hash_slot_num: int, index_num_max: int) -> IndexFile:
        """Map an existing file and load its header. ValueError if its size is wrong."""
        file_size = index_file_size_bytes(hash_slot_num, index_num_max)
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size != file_size:
                raise ValueError(f"{path}: size {size} != configured {file_size}")
            mm = mmap.mmap(fd, file_size)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, hash_slot_num, index_num_max, fd, mm)

    # -- header ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num_max

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    @property
    def closed(self) -> bool:
        return self._mm is None

    def header(self) -> IndexHeader:
        """The in-memory header (index_count as RocketMQ keeps it, >= 1)."""
        return IndexHeader(self.begin_timestamp_ms, self.end_timestamp_ms, self.begin_phy_offset,
                           self.end_phy_offset, self.hash_slot_count, self.index_count)

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """[begin_ms, end_ms] overlaps [begin_timestamp, end_timestamp] (RocketMQ's three tests)."""
        file_begin, file_end = self.begin_timestamp_ms, self.end_timestamp_ms
        return ((begin_ms < file_begin and end_ms > file_end)
                or file_begin <= begin_ms <= file_end
                or file_begin <= end_ms <= file_end)

    # -- put ---------------------------------------------------------------------------------
    def put_key(self, key_str: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Index ``key_str`` (already ``topic#key``). False when the file is full."""
        return self.put_key_hash(index_key_hash(key_str), phy_offset, store_timestamp_ms)

    def put_key_hash(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> bool:
        """``putKey`` given the key's index hash (>= 0). False when the file is full."""
        index_count = self.index_count
        if index_count >= self.index_num_max:
            return False
        mm = self._mm
        slot_pos = INDEX_HEADER_SIZE_BYTES + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE_BYTES
        prev_index = _slot_unpack_from(mm, slot_pos)[0]
        if prev_index <= 0 or prev_index > index_count:
            prev_index = 0
        begin_timestamp_ms = self.begin_timestamp_ms
        if begin_timestamp_ms <= 0 or store_timestamp_ms <= begin_timestamp_ms:
            time_diff = 0
        else:
            time_diff = (store_timestamp_ms - begin_timestamp_ms) // 1000
            if time_diff > JAVA_INT_MAX:
                time_diff = JAVA_INT_MAX
        # Entry first, then the slot, then the counters: a concurrent reader that sees the
        # slot already finds the entry.
        _entry_pack_into(mm, self._entries_pos + index_count * 20, key_hash, phy_offset,
                         time_diff, prev_index)
        _slot_pack_into(mm, slot_pos, index_count)
        if index_count <= 1:
            # First entry: begin values become this message's, after time_diff used the old ones.
            self.begin_phy_offset = phy_offset
            self.begin_timestamp_ms = begin_timestamp_ms = store_timestamp_ms
        if prev_index == 0:
            self.hash_slot_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp_ms = store_timestamp_ms
        self.index_count = index_count + 1
        _header_pack_into(mm, 0, begin_timestamp_ms, store_timestamp_ms, self.begin_phy_offset,
                          phy_offset, self.hash_slot_count, index_count + 1)
        return True

    def has_entry(self, key_hash: int, phy_offset: int) -> bool:
        """Is (key_hash, phy_offset) already in this file? Walks the slot's chain, newest
        first, stopping once entries point before ``phy_offset``."""
        mm = self._mm
        index_count = self.index_count
        slot_pos = INDEX_HEADER_SIZE_BYTES + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE_BYTES
        index = _slot_unpack_from(mm, slot_pos)[0]
        steps = 0
        while 0 < index < index_count and steps < index_count:
            entry_hash, entry_phy, _, prev_index = _entry_unpack_from(mm, self._entries_pos + index * 20)
            if entry_phy < phy_offset:
                return False
            if entry_hash == key_hash and entry_phy == phy_offset:
                return True
            if prev_index == index:
                return False
            index = prev_index
            steps += 1
        return False

    # -- select ------------------------------------------------------------------------------
    def select_phy_offsets(self, key_str: str, max_num: int, begin_ms: int,
                           end_ms: int) -> list[int]:
        """Phy offsets of entries with ``key_str``'s hash stored in [begin_ms, end_ms], newest
        first, at most ``max_num``. Hash collisions are included: the caller checks the keys."""
        phy_offsets: list[int] = []
        self.select_into(phy_offsets, index_key_hash(key_str), max_num, begin_ms, end_ms)
        return phy_offsets

    def select_into(self, phy_offsets: list[int], key_hash: int, max_num: int, begin_ms: int,
                    end_ms: int) -> None:
        """``selectPhyOffset``: append to ``phy_offsets`` until it holds ``max_num``."""
        mm = self._mm
        if mm is None:
            return
        index_count = self.index_count
        if index_count <= 1:
            return
        # Valid indexes are < index_count; RocketMQ tests "> index_count", which in a full
        # file would read past the end. The tighter bound changes nothing on a valid file.
        index_max = min(index_count, self.index_num_max - 1)
        slot_pos = INDEX_HEADER_SIZE_BYTES + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE_BYTES
        index = _slot_unpack_from(mm, slot_pos)[0]
        if index <= 0 or index > index_max:
            return
        begin_timestamp_ms = self.begin_timestamp_ms
        entries_pos = self._entries_pos
        for _ in range(index_count - 1):  # no valid chain is longer; a corrupt one may loop
            if len(phy_offsets) >= max_num:
                break
            key_hash_read, phy_offset, time_diff, prev_index = _entry_unpack_from(
                mm, entries_pos + index * 20)
            if time_diff < 0:
                break
            timestamp_ms = begin_timestamp_ms + time_diff * 1000
            if key_hash_read == key_hash and begin_ms <= timestamp_ms <= end_ms:
                phy_offsets.append(phy_offset)
            if (prev_index <= 0 or prev_index > index_max or prev_index == index
                    or timestamp_ms < begin_ms):
                break
            index = prev_index

    # -- lifecycle ---------------------------------------------------------------------------
    def write_header(self) -> None:
        """``IndexHeader.updateByteBuffer``: the in-memory header, index_count included."""
        _header_pack_into(self._mm, 0, self.begin_timestamp_ms, self.end_timestamp_ms,
                          self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                          self.index_count)

    def sync(self) -> None:
        """fdatasync: writes back the pages dirtied through the mapping (releases the GIL)."""
        os.fdatasync(self._fd)

    def flush(self) -> None:
        """Write the header, then make the whole file durable."""
        self.write_header()
        self.sync()

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (f"IndexFile({self.name}, entries={self.entry_count}, "
                f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}], "
                f"ts=[{self.begin_timestamp_ms}, {self.end_timestamp_ms}])")


class IndexService:
    """The files of ``index/``, oldest first; builds the index on dispatch and answers queries.

    ``last_full_end_timestamp`` is the end timestamp of the newest *full* file that has been
    flushed; the store writes it to the checkpoint as index_msg_timestamp, by reading it after
    ``flush()`` or through ``on_index_msg_timestamp`` (called, under the flush lock, whenever it
    changes; it must not call back into this service). It only advances after the full file is
    durable, so an abnormal start never keeps a file that was still being written; ``truncate``
    may lower it.
    """

    def __init__(self, index_dir: Path, hash_slot_num: int, index_num_max: int, clock: Clock,
                 query_max_num: int = QUERY_MAX_NUM_DEFAULT,
                 on_index_msg_timestamp: Callable[[int], None] | None = None) -> None:
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
            names = sorted(p.name for p in self.index_dir.iterdir()
                           if p.is_file() and _is_index_file_name(p.name))
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
                    log.info("abnormal exit: deleting %r, newer than index_msg_timestamp %d",
                             index_file, index_msg_timestamp)
                    index_file.destroy()
                    continue
                files.append(index_file)
            self._files = tuple(files)
            if names:
                self._last_name = names[-1]

    # -- build -------------------------------------------------------------------------------
    def build_index(self, topic: str, keys: str, uniq_key: str, phy_offset: int,
                    store_timestamp_ms: int, sys_flag: int) -> None:
        """``buildIndex`` for one dispatched record: UNIQ_KEY, then each key of ``keys``."""
        with self._lock:
            files = self._files
            index_file = files[-1] if files else None
            partial = False  # the record's keys may be split over the last file and a lost one
            if index_file is not None:
                end_phy_offset = index_file.end_phy_offset
                if phy_offset < end_phy_offset:
                    return  # already indexed (re-dispatch)
                partial = phy_offset == end_phy_offset and (end_phy_offset > 0 or index_file.index_count > 1)
            if sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
                return
            prefix_hash = self._prefix_hashes.get(topic)
            if prefix_hash is None:
                prefix_hash = self._prefix_hash_locked(topic)
            for key in (uniq_key, *keys.split(KEY_SEPARATOR)) if keys else (uniq_key,):
                if not key:
                    continue
                key_hash = index_key_hash_from_u32(java_hash_extend_u32(prefix_hash, key))
                if partial and self._has_entry_locked(key_hash, phy_offset):
                    continue
                if index_file is None or not index_file.put_key_hash(key_hash, phy_offset,
                                                                     store_timestamp_ms):
                    index_file = self._put_after_roll_locked(key_hash, phy_offset, store_timestamp_ms)

    def _has_entry_locked(self, key_hash: int, phy_offset: int) -> bool:
        """Does a file that may hold this record's keys (newest ones) already have this key?"""
        for index_file in reversed(self._files):
            if index_file.end_phy_offset < phy_offset:
                return False
            if index_file.has_entry(key_hash, phy_offset):
                return True
        return False

    def _prefix_hash_locked(self, topic: str) -> int:
        if len(self._prefix_hashes) >= _PREFIX_CACHE_MAX:
            self._prefix_hashes.clear()
        prefix_hash = java_hash_extend_u32(0, index_key(topic, ""))
        self._prefix_hashes[topic] = prefix_hash
        return prefix_hash

    def _put_after_roll_locked(self, key_hash: int, phy_offset: int,
                               store_timestamp_ms: int) -> IndexFile:
        index_file = self._roll_locked()
        ok = index_file.put_key_hash(key_hash, phy_offset, store_timestamp_ms)
        assert ok, "a new index file refused its first key"
        return index_file

    def _roll_locked(self) -> IndexFile:
        """``getAndCreateLastIndexFile`` when there is no file or the last one is full: the
        new header starts at the previous file's end values."""
        files = self._files
        prev = files[-1] if files else None
        end_phy_offset = prev.end_phy_offset if prev is not None else 0
        end_timestamp_ms = prev.end_timestamp_ms if prev is not None else 0
        self.index_dir.mkdir(parents=True, exist_ok=True)
        name = self._new_file_name_locked()
        index_file = IndexFile.create(self.index_dir / name, self.hash_slot_num, self.index_num_max,
                                      end_phy_offset, end_timestamp_ms)
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
                durable = [f.end_timestamp_ms for f in files[:keep]
                           if f.is_write_full and f not in self._full_unflushed]
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
