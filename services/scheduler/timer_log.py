"""TimerLog: the append-only file of 52-byte timer units, in fixed-size segments.

Layout (RocketMQ 5's ``TimerLog``): ``timerlog/{20-digit start offset}``, each segment
``segment_size_bytes`` long (created sparse at full size) and named, like CommitLog segments,
by the offset of its first byte in the log (docs/store-files.md, section 2). A unit never
straddles two segments: when fewer than 52 + 16 bytes remain, a 16-byte blank is written and
the next unit starts the next segment. Byte layouts:
``services/domain/format/timerlog_format.py``.

I/O is ``pwrite``/``pread`` on one descriptor per segment, not mmap: only the units being
read are ever in this process's memory, however many timers are pending (10 million units
are 520 MB on disk). Written bytes are in the kernel's page cache at once, so a ``kill -9``
loses nothing that ``commit`` returned; ``flush`` (fdatasync) makes them survive a power loss.

Invariants:
* ``flushed_pos <= write_pos``; every position below ``write_pos`` is a unit, a blank, or the
  unused tail after a blank.
* Units are appended by one thread (the timer loop); ``set_state`` rewrites 4 bytes in place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from services.domain.format.timerlog_format import (
    BLANK_SIZE_BYTES,
    STATE_OFFSET,
    UNIT_SIZE_BYTES,
    CorruptUnit,
    TimerUnit,
    decode_unit,
    encode_blank,
    encode_state,
    encode_unit,
    is_blank,
    unit_fits,
)

log = logging.getLogger(__name__)

SCAN_CHUNK_UNITS = 65_536  # units read per pread while scanning (3.4 MB)


def segment_name(start: int) -> str:
    return f"{start:020d}"


class TimerLog:
    def __init__(self, directory: Path, segment_size_bytes: int) -> None:
        assert segment_size_bytes >= UNIT_SIZE_BYTES + BLANK_SIZE_BYTES
        self.directory = directory
        self.segment_size_bytes = segment_size_bytes
        self._fds: dict[int, int] = {}  # segment start -> descriptor, ascending
        self.write_pos = 0
        self.flushed_pos = 0
        self._pending = bytearray()  # appended, not yet written: starts at _pending_pos
        self._pending_pos = 0
        self._dirty: set[int] = set()  # segments written since the last flush

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Open every segment; ``write_pos`` is set by ``recover`` (or stays 0 when empty)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in self.directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for i, name in enumerate(names):
            path = self.directory / name
            size = path.stat().st_size
            if size == 0 and i == len(names) - 1:
                log.warning("deleting empty last TimerLog segment %s", name)
                path.unlink()
                continue
            if size != self.segment_size_bytes:
                raise ValueError(
                    f"TimerLog segment {path} is {size} bytes, expected {self.segment_size_bytes} "
                    "(was timerlog_file_size_bytes changed?)"
                )
            start = int(name)
            if start % self.segment_size_bytes:
                raise ValueError(f"TimerLog segment {path} does not start on a segment boundary")
            self._fds[start] = os.open(path, os.O_RDWR)
        if self._fds:
            last = max(self._fds)
            self.write_pos = self.flushed_pos = self._pending_pos = last + self.segment_size_bytes

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    @property
    def min_pos(self) -> int:
        return min(self._fds) if self._fds else self.write_pos

    def segment_starts(self) -> list[int]:
        return sorted(self._fds)

    # -- appending -------------------------------------------------------------------------
    def append_unit(self, unit: TimerUnit) -> int:
        """Buffer one unit; returns its position. Written by the next ``commit``."""
        return self.append_encoded(encode_unit(unit))

    def append_encoded(self, data: bytes) -> int:
        assert len(data) == UNIT_SIZE_BYTES
        size = self.segment_size_bytes
        in_segment = self.write_pos % size
        if not unit_fits(in_segment, size):
            self._pending += encode_blank(size - in_segment)
            self._commit_pending()
            self.write_pos += size - in_segment
            self._pending_pos = self.write_pos
        if self.write_pos % size == 0 and self.write_pos not in self._fds:
            self._commit_pending()
            self._create_segment(self.write_pos)
        position = self.write_pos
        self._pending += data
        self.write_pos += UNIT_SIZE_BYTES
        return position

    def commit(self) -> None:
        """Write every buffered unit into the page cache (kill -9 safe from here)."""
        self._commit_pending()

    def _commit_pending(self) -> None:
        if not self._pending:
            self._pending_pos = self.write_pos
            return
        start = self._pending_pos - self._pending_pos % self.segment_size_bytes
        fd = self._fds[start]
        written = os.pwrite(fd, self._pending, self._pending_pos - start)
        if written != len(self._pending):
            raise OSError(f"short write to TimerLog segment {segment_name(start)}")
        self._dirty.add(start)
        self._pending = bytearray()
        self._pending_pos = self.write_pos

    def _create_segment(self, start: int) -> None:
        path = self.directory / segment_name(start)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, self.segment_size_bytes)
        self._fds[start] = fd
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def flush(self) -> int:
        """fdatasync what was committed; returns the new flushed position."""
        self._commit_pending()
        position = self.write_pos
        for start in sorted(self._dirty):
            fd = self._fds.get(start)
            if fd is not None:
                os.fdatasync(fd)
        self._dirty.clear()
        self.flushed_pos = position
        return position

    # -- reading and state -----------------------------------------------------------------
    def read_unit(self, position: int) -> TimerUnit | None:
        """The unit at ``position``; None if its segment is gone or the bytes are no unit."""
        if self._pending and position >= self._pending_pos:
            self._commit_pending()
        size = self.segment_size_bytes
        fd = self._fds.get(position - position % size)
        if fd is None or position < 0 or position + UNIT_SIZE_BYTES > self.write_pos:
            return None
        data = os.pread(fd, UNIT_SIZE_BYTES, position % size)
        try:
            return decode_unit(data)
        except CorruptUnit:
            return None

    def set_state(self, position: int, state: int) -> None:
        """Rewrite a unit's dequeue state in place (page cache at once: survives kill -9)."""
        if self._pending and position >= self._pending_pos:
            self._commit_pending()
        size = self.segment_size_bytes
        start = position - position % size
        fd = self._fds.get(start)
        if fd is None:
            return  # the segment was deleted: nothing left to mark
        os.pwrite(fd, encode_state(state), position % size + STATE_OFFSET)
        self._dirty.add(start)

    # -- recovery and retention ---------------------------------------------------------------
    def scan(self, from_pos: int) -> Iterator[tuple[int, TimerUnit]]:
        """Every valid unit from ``from_pos`` (a unit position) in order, up to the first bytes
        that are neither a unit nor, where no unit fits, a blank. ``scan_end`` is where that was."""
        size = self.segment_size_bytes
        position = max(from_pos, self.min_pos)
        self.scan_end = position
        while True:
            start = position - position % size
            fd = self._fds.get(start)
            if fd is None:
                return
            in_segment = position - start
            if not unit_fits(in_segment, size):
                if not is_blank(os.pread(fd, BLANK_SIZE_BYTES, in_segment)):
                    return
                position = self.scan_end = start + size
                continue
            fitting = (size - UNIT_SIZE_BYTES - BLANK_SIZE_BYTES - in_segment) // UNIT_SIZE_BYTES + 1
            count = min(fitting, SCAN_CHUNK_UNITS)
            chunk = os.pread(fd, count * UNIT_SIZE_BYTES, in_segment)
            for k in range(len(chunk) // UNIT_SIZE_BYTES):
                try:
                    unit = decode_unit(chunk, k * UNIT_SIZE_BYTES)
                except CorruptUnit:
                    return
                yield position, unit
                position += UNIT_SIZE_BYTES
                self.scan_end = position
            if len(chunk) < count * UNIT_SIZE_BYTES:
                return

    def truncate(self, end: int) -> None:
        """Make ``end`` the write position: zero everything after it, drop later segments."""
        self._pending = bytearray()
        size = self.segment_size_bytes
        for start in sorted(self._fds):
            if start >= end:
                os.close(self._fds.pop(start))
                (self.directory / segment_name(start)).unlink()
                self._dirty.discard(start)
        start = end - end % size
        fd = self._fds.get(start)
        if fd is not None and start < end:
            os.ftruncate(fd, end - start)  # shrink then grow: the tail reads as zeros
            os.ftruncate(fd, size)
            self._dirty.add(start)
        self.write_pos = self._pending_pos = end
        self.flushed_pos = min(self.flushed_pos, end)

    def delete_segment(self, start: int) -> None:
        """Delete a segment (never the one being written)."""
        assert start + self.segment_size_bytes <= self.write_pos - self.write_pos % self.segment_size_bytes
        fd = self._fds.pop(start, None)
        if fd is not None:
            os.close(fd)
            (self.directory / segment_name(start)).unlink(missing_ok=True)
            self._dirty.discard(start)

    def read_range(self, start: int, offset: int, length: int) -> bytes:
        """Raw bytes of a segment (for retention statistics)."""
        return os.pread(self._fds[start], length, offset)
