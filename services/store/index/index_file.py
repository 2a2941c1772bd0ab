"""IndexFile (one file of the index; ``service.py`` holds IndexService, the directory of them):
RocketMQ's ``topic#key`` -> phy offset index, byte for byte.

Layout in ``services/domain/format/index_format.py``. Files live in ``index/`` and are named by
the local time of their creation, ``yyyyMMddHHmmssSSS`` (taken from the injected clock). Each
one is created sparse (``ftruncate``, never pre-filled) and mapped. Blocks are reserved
(``reserve_blocks``) before anything is written through the mapping: the header and the slots
(written anywhere) at creation, the entries a chunk (``RESERVE_CHUNK_BYTES``) ahead of the writer,
by ``IndexFile.reserve``, which every write path calls first. On a full disk a store into a hole
would kill the process with SIGBUS; the reservation raises ENOSPC instead, the put fails with
nothing half written, and dispatch retries it. An entry and its slot are
written by ``put_entry`` alone. ``IndexFile.put_key_hash`` writes them and the whole header
through the mapping at once, as RocketMQ's write-through setters do; the dispatch path
(``IndexService.build_index_batch``, which ``build_index`` also runs) writes the same bytes but
the 40-byte header once per file per batch (see there for what a crash in the middle of a batch
leaves), and its numpy path (``batch.py``) the same bytes for a whole run of keys at once.

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

IndexService's threads and locks (``_flush_lock -> _lock``):

* ``_lock`` serialises build_index(_batch) and every change of the file list (roll, load,
  delete, truncate, close). The file list is a tuple replaced on change, never mutated.
* ``query`` takes no lock: it reads the current tuple and walks the mapped files. Entries are
  written before the slot that points at them, and the ``index_count`` attribute covers an
  index before any slot holds it; a query reads the slot, then ``index_count``. So a reader
  never follows an index to an unwritten entry, nor takes a fresh slot value for out of range
  (which would hide the older keys of that slot). The other header attributes may lag until
  the end of a batch: a query may miss the batch's own keys until then. A file closed under a
  query raises ValueError from the closed mapping; the query ends that file's walk (its data
  is going away).
* ``_flush_lock`` keeps a file from being closed while ``flush`` runs ``fdatasync`` on it
  outside ``_lock`` (the dispatch thread is never blocked by a disk flush).

Invariants: a file's ``1 <= index_count <= index_num_max``; chains strictly decrease
(``prev_index < index``); end_phy_offset and end_timestamp never decrease across files.
"""

from __future__ import annotations

import logging
import mmap
import operator
import os
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from services.domain.format.index_format import (
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE_BYTES,
    INDEX_FILE_NAME_LENGTH,
    INDEX_HEADER,
    INDEX_HEADER_SIZE_BYTES,
    INDEX_SLOT,
    INDEX_SLOT_SIZE_BYTES,
    JAVA_INT_MAX,
    IndexHeader,
    entry_position,
    index_file_size_bytes,
    index_key_hash,
)
from services.domain.format.properties_format import KEY_SEPARATOR
from services.runtime.files import reserve_blocks

log = logging.getLogger(__name__)

QUERY_MAX_NUM_DEFAULT = 64  # maxMsgsNumBatch
_PREFIX_CACHE_MAX = 4096  # topics whose ``topic#`` hash is kept

_entry_pack_into = INDEX_ENTRY.pack_into
_entry_unpack_from = INDEX_ENTRY.unpack_from
_slot_pack_into = INDEX_SLOT.pack_into
_slot_unpack_from = INDEX_SLOT.unpack_from
_header_pack_into = INDEX_HEADER.pack_into
# From this many records in a batch on, splitting, hashing and putting their keys with numpy
# beats a Python loop.
_NP_MIN_RECORDS = 20
_FIELD_SEPARATOR = "\x01"  # MessageConst NAME_VALUE_SEPARATOR: never inside a property value
_FIELD_SEPARATOR_UNIT = ord(_FIELD_SEPARATOR)
_KEY_SEPARATOR = KEY_SEPARATOR
_KEY_SEPARATOR_UNIT = ord(_KEY_SEPARATOR)
_get_topic = operator.attrgetter("topic")
_get_keys = operator.attrgetter("keys")
_get_uniq_key = operator.attrgetter("uniq_key")
_get_phy_offset = operator.attrgetter("phy_offset")
_get_store_timestamp_ms = operator.attrgetter("store_timestamp_ms")
_get_sys_flag = operator.attrgetter("sys_flag")
_SLOTS_DTYPE = np.dtype(">i4")
# Entries get their blocks this far ahead of the writer (4 MiB: about 210,000 keys per call).
RESERVE_CHUNK_BYTES = 4 << 20


class KeyedRecord(Protocol):
    """What the index reads of a dispatched record (a ``DispatchRequest``, or build_index's
    ``_Record``)."""

    @property
    def topic(self) -> str: ...
    @property
    def keys(self) -> str: ...
    @property
    def uniq_key(self) -> str: ...
    @property
    def phy_offset(self) -> int: ...
    @property
    def store_timestamp_ms(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...


class _Record:
    """build_index's one record, with the DispatchRequest fields build_index_batch reads."""

    __slots__ = ("topic", "keys", "uniq_key", "phy_offset", "store_timestamp_ms", "sys_flag")

    def __init__(
        self, topic: str, keys: str, uniq_key: str, phy_offset: int, store_timestamp_ms: int, sys_flag: int
    ) -> None:
        self.topic = topic
        self.keys = keys
        self.uniq_key = uniq_key
        self.phy_offset = phy_offset
        self.store_timestamp_ms = store_timestamp_ms
        self.sys_flag = sys_flag


def put_entry(
    mm: mmap.mmap,
    entries_pos: int,
    hash_slot_num: int,
    index_count: int,
    key_hash: int,
    phy_offset: int,
    store_timestamp_ms: int,
    begin_timestamp_ms: int,
) -> int:
    """``putKey``'s writes of the key that takes index ``index_count`` (the one place both
    ``IndexFile.put_key_hash`` and the dispatch loop, ``IndexService._build_batch_py_locked``,
    write an entry): the entry, chained to the index its slot held, then the slot, so a reader
    that sees the slot finds the entry. Returns that previous index: 0 when the slot was empty
    or held an index out of range (the caller's hash_slot_count grows). The caller updates the
    header values (a file's first entry sets the begin values, after time_diff used the old
    ones)."""
    slot_pos = INDEX_HEADER_SIZE_BYTES + (key_hash % hash_slot_num) * INDEX_SLOT_SIZE_BYTES
    prev_index = _slot_unpack_from(mm, slot_pos)[0]
    if prev_index <= 0 or prev_index > index_count:
        prev_index = 0
    if begin_timestamp_ms <= 0 or store_timestamp_ms <= begin_timestamp_ms:
        time_diff = 0
    else:
        time_diff = (store_timestamp_ms - begin_timestamp_ms) // 1000
        if time_diff > JAVA_INT_MAX:
            time_diff = JAVA_INT_MAX
    _entry_pack_into(
        mm, entries_pos + index_count * INDEX_ENTRY_SIZE_BYTES, key_hash, phy_offset, time_diff, prev_index
    )
    _slot_pack_into(mm, slot_pos, index_count)
    return prev_index


def _set_header_fields(
    index_file: IndexFile,
    begin_timestamp_ms: int,
    end_timestamp_ms: int,
    begin_phy_offset: int,
    end_phy_offset: int,
    hash_slot_count: int,
    index_count: int,
) -> None:
    """Publish build_index_batch's header values to the attributes queries read, index_count
    last (a query that sees it sees the rest)."""
    assert 1 <= index_count <= index_file.index_num_max, (index_file, index_count)
    index_file.begin_timestamp_ms = begin_timestamp_ms
    index_file.end_timestamp_ms = end_timestamp_ms
    index_file.begin_phy_offset = begin_phy_offset
    index_file.end_phy_offset = end_phy_offset
    index_file.hash_slot_count = hash_slot_count
    index_file.index_count = index_count


def _store_header(
    index_file: IndexFile,
    begin_timestamp_ms: int,
    end_timestamp_ms: int,
    begin_phy_offset: int,
    end_phy_offset: int,
    hash_slot_count: int,
    index_count: int,
) -> None:
    """``_set_header_fields``, then the 40 header bytes through the mapping."""
    _set_header_fields(
        index_file, begin_timestamp_ms, end_timestamp_ms, begin_phy_offset, end_phy_offset, hash_slot_count, index_count
    )
    _header_pack_into(
        index_file.mapping,
        0,
        begin_timestamp_ms,
        end_timestamp_ms,
        begin_phy_offset,
        end_phy_offset,
        hash_slot_count,
        index_count,
    )


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

    __slots__ = (
        "path",
        "hash_slot_num",
        "index_num_max",
        "file_size",
        "begin_timestamp_ms",
        "end_timestamp_ms",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
        "_fd",
        "_mm",
        "_entries_pos",
        "_reserved_end",
    )

    def __init__(self, path: Path, hash_slot_num: int, index_num_max: int, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num_max = index_num_max
        self.file_size = index_file_size_bytes(hash_slot_num, index_num_max)
        self._fd = fd
        self._mm: mmap.mmap | None = mm  # None once closed
        self._entries_pos = entry_position(hash_slot_num, 0)
        self._reserved_end = 0  # bytes [0, _reserved_end) have blocks (``reserve``)
        header = IndexHeader(*INDEX_HEADER.unpack_from(mm, 0))
        self.begin_timestamp_ms = header.begin_timestamp
        self.end_timestamp_ms = header.end_timestamp
        self.begin_phy_offset = header.begin_phy_offset
        self.end_phy_offset = header.end_phy_offset
        self.hash_slot_count = header.hash_slot_count
        # IndexHeader.load reads <= 0 as 1; a count past the end can only be corruption.
        self.index_count = min(max(header.index_count, 1), index_num_max)

    @classmethod
    def create(
        cls, path: Path, hash_slot_num: int, index_num_max: int, end_phy_offset: int = 0, end_timestamp_ms: int = 0
    ) -> IndexFile:
        """A new sparse file, its header and slots (and a first chunk of entries) given blocks
        (OSError, and no file, when the disk is full); begin/end phy offset and timestamp
        pre-set to the previous file's end values when they are > 0 (written through, like
        RocketMQ's setters)."""
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
        try:
            index_file.reserve(1)
        except BaseException:
            index_file.destroy()
            raise
        if end_phy_offset > 0:
            index_file.begin_phy_offset = index_file.end_phy_offset = end_phy_offset
        if end_timestamp_ms > 0:
            index_file.begin_timestamp_ms = index_file.end_timestamp_ms = end_timestamp_ms
        if end_phy_offset > 0 or end_timestamp_ms > 0:
            # index_count stays 0 on disk until the first put, as in RocketMQ.
            _header_pack_into(
                mm,
                0,
                index_file.begin_timestamp_ms,
                index_file.end_timestamp_ms,
                index_file.begin_phy_offset,
                index_file.end_phy_offset,
                0,
                0,
            )
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

    @property
    def mapping(self) -> mmap.mmap:
        """The open file's mapping (writers hold the service's lock: the file is never closed
        under them; a query reads ``_mm`` itself and stops at a closed file)."""
        mm = self._mm
        assert mm is not None, f"{self!r} is closed"
        return mm

    def put_state(self) -> tuple[mmap.mmap, int, int, int, int, int, int, int, int]:
        """What an inlined put loop keeps in locals: (mapping, entries position, index_count,
        begin/end timestamp, begin/end phy offset, hash_slot_count, reserved index end). The
        loop calls ``reserve(index_count + 1)`` before writing an index at or past the last."""
        return (
            self.mapping,
            self._entries_pos,
            self.index_count,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.reserved_index_end,
        )

    @property
    def reserved_index_end(self) -> int:
        """Entries below this index (and the header and slots, when > 0) have their blocks."""
        return max((self._reserved_end - self._entries_pos) // INDEX_ENTRY_SIZE_BYTES, 0)

    def reserve(self, index_end: int) -> int:
        """Give blocks to the header, the slots and every entry below index ``index_end``
        (``RESERVE_CHUNK_BYTES`` more when it has to ask), before a put writes them through the
        mapping. Returns ``reserved_index_end``. OSError (ENOSPC) when the disk is full: nothing
        was written, the caller's put fails and is retried."""
        needed = self._entries_pos + min(index_end, self.index_num_max) * INDEX_ENTRY_SIZE_BYTES
        reserved_end = self._reserved_end
        if needed > reserved_end:
            ahead = max(reserved_end, self._entries_pos) + RESERVE_CHUNK_BYTES  # a chunk of entries
            end = min(self.file_size, max(needed, ahead))
            if not reserve_blocks(self._fd, reserved_end, end - reserved_end):
                end = self.file_size  # the filesystem cannot reserve: nothing more to ask
            self._reserved_end = end
        return self.reserved_index_end

    def header(self) -> IndexHeader:
        """The in-memory header (index_count as RocketMQ keeps it, >= 1)."""
        return IndexHeader(
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """[begin_ms, end_ms] overlaps [begin_timestamp, end_timestamp] (RocketMQ's three tests)."""
        file_begin, file_end = self.begin_timestamp_ms, self.end_timestamp_ms
        return (
            (begin_ms < file_begin and end_ms > file_end)
            or file_begin <= begin_ms <= file_end
            or file_begin <= end_ms <= file_end
        )

    # -- put ---------------------------------------------------------------------------------
    def put_key(self, key_str: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Index ``key_str`` (already ``topic#key``). False when the file is full."""
        return self.put_key_hash(index_key_hash(key_str), phy_offset, store_timestamp_ms)

    def put_key_hash(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> bool:
        """``putKey`` given the key's index hash (>= 0). False when the file is full."""
        index_count = self.index_count
        if index_count >= self.index_num_max:
            return False
        mm = self.mapping
        self.reserve(index_count + 1)
        begin_timestamp_ms = self.begin_timestamp_ms
        # The entry and the slot first, then the counters.
        prev_index = put_entry(
            mm,
            self._entries_pos,
            self.hash_slot_num,
            index_count,
            key_hash,
            phy_offset,
            store_timestamp_ms,
            begin_timestamp_ms,
        )
        if index_count <= 1:
            # First entry: begin values become this message's, after time_diff used the old ones.
            self.begin_phy_offset = phy_offset
            self.begin_timestamp_ms = begin_timestamp_ms = store_timestamp_ms
        if prev_index == 0:
            self.hash_slot_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp_ms = store_timestamp_ms
        self.index_count = index_count + 1
        _header_pack_into(
            mm,
            0,
            begin_timestamp_ms,
            store_timestamp_ms,
            self.begin_phy_offset,
            phy_offset,
            self.hash_slot_count,
            index_count + 1,
        )
        return True

    def has_entry(self, key_hash: int, phy_offset: int) -> bool:
        """Is (key_hash, phy_offset) already in this file? Walks the slot's chain, newest
        first, stopping once entries point before ``phy_offset``."""
        mm = self.mapping
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
    def select_phy_offsets(self, key_str: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Phy offsets of entries with ``key_str``'s hash stored in [begin_ms, end_ms], newest
        first, at most ``max_num``. Hash collisions are included: the caller checks the keys."""
        phy_offsets: list[int] = []
        self.select_into(phy_offsets, index_key_hash(key_str), max_num, begin_ms, end_ms)
        return phy_offsets

    def select_into(self, phy_offsets: list[int], key_hash: int, max_num: int, begin_ms: int, end_ms: int) -> None:
        """``selectPhyOffset``: append to ``phy_offsets`` until it holds ``max_num``."""
        mm = self._mm
        if mm is None:
            return
        slot_pos = INDEX_HEADER_SIZE_BYTES + (key_hash % self.hash_slot_num) * INDEX_SLOT_SIZE_BYTES
        index = _slot_unpack_from(mm, slot_pos)[0]
        # index_count is read *after* the slot: a put publishes index_count >= i before any
        # slot holds i, so a concurrent put cannot make the slot look out of range.
        index_count = self.index_count
        if index_count <= 1:
            return
        # Valid indexes are < index_count; RocketMQ tests "> index_count", which in a full
        # file would read past the end. The tighter bound changes nothing on a valid file.
        index_max = min(index_count, self.index_num_max - 1)
        if index <= 0 or index > index_max:
            return
        begin_timestamp_ms = self.begin_timestamp_ms
        entries_pos = self._entries_pos
        for _ in range(index_count - 1):  # no valid chain is longer; a corrupt one may loop
            if len(phy_offsets) >= max_num:
                break
            key_hash_read, phy_offset, time_diff, prev_index = _entry_unpack_from(mm, entries_pos + index * 20)
            if time_diff < 0:
                break
            timestamp_ms = begin_timestamp_ms + time_diff * 1000
            if key_hash_read == key_hash and begin_ms <= timestamp_ms <= end_ms:
                phy_offsets.append(phy_offset)
            if prev_index <= 0 or prev_index > index_max or prev_index == index or timestamp_ms < begin_ms:
                break
            index = prev_index

    # -- lifecycle ---------------------------------------------------------------------------
    def write_header(self) -> None:
        """``IndexHeader.updateByteBuffer``: the in-memory header, index_count included."""
        if self._reserved_end == 0:  # a loaded file nothing was put into yet
            try:
                self.reserve(0)
            except OSError as exc:
                # Its header on disk is the loaded one (but a 0 index_count RocketMQ would
                # write as 1): nothing is lost by not writing it on a full disk.
                log.warning("%r: header not written (%s)", self, exc)
                return
        _header_pack_into(
            self.mapping,
            0,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

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
        return (
            f"IndexFile({self.name}, entries={self.entry_count}, "
            f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}], "
            f"ts=[{self.begin_timestamp_ms}, {self.end_timestamp_ms}])"
        )
