"""Fixed-size mapped files and the ordered queue of them (CommitLog, ConsumeQueue).

A queue is a directory of files of one size, each named by the 20-digit start offset of the
file in the queue's byte space. Offset ``o`` lives in file ``o - o % size`` at ``o % size``.

Files are created with ``ftruncate`` and their blocks reserved (``reserve_blocks``: a store
into a hole on a full disk is SIGBUS, a reservation is ENOSPC), never written at creation, and,
optionally, warmed through the mapping: a file pre-filled with ``write()`` would make every
later small flush write back a 2 MiB folio on this kernel. Flushing is ``os.fdatasync`` on the file's descriptor (it also writes back pages
dirtied through the mapping, and unlike ``mmap.flush`` it releases the GIL).

Pages are populated ahead of the writer (``MADV_POPULATE_WRITE`` through ctypes, so the GIL is
free meanwhile) by ``WarmAheadService``'s thread, or by the writer itself when it gets there first.

Write errors are sticky: after a failed write or fdatasync a file refuses every later write.

Invariants (per file): 0 <= flushed_position <= wrote_position <= file_size.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from services.runtime.files import reserve_blocks

log = logging.getLogger(__name__)

PAGE_SIZE_BYTES = 4096
# madvise(MADV_POPULATE_WRITE) (Linux 5.14+; not named in Python 3.11's mmap module): fault
# pages in ahead of the writer, returning an error instead of SIGBUS if that fails. Measured
# here: a 1.1 KB write into a fallocate'd page costs 2.4 us on first touch (ext4 unwritten
# extents), 0.56 us with 4 MiB populated ahead of it.
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
POPULATE_CHUNK_BYTES = 4 << 20
_populate_supported = True


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc ``madvise`` through ctypes, which releases the GIL for the call (``mmap.madvise``
    keeps it: populating 4 MiB takes 1-6 ms here, ~1.5 us per 1 KiB message, which a warming
    thread can then spend on the other core). None where ctypes cannot reach libc."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def _mapping_address(mm: mmap.mmap) -> int | None:
    """Start address of ``mm`` (the buffer export is released at once, so close() still works)."""
    if _MADVISE is None:
        return None
    view = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One fixed-size file, mapped read-write. Appends go through the mapping."""

    def __init__(self, path: Path, file_size: int, file_from_offset: int, warm: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = file_from_offset
        created = not path.exists()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if created or os.fstat(self.fd).st_size == 0:
                os.ftruncate(self.fd, file_size)
                # Reserve the blocks now: a write through the mapping into a hole on a full
                # disk would raise SIGBUS; here it fails cleanly with ENOSPC instead.
                try:
                    reserve_blocks(self.fd, 0, file_size)
                except OSError:
                    os.close(self.fd)
                    self.fd = -1
                    path.unlink(missing_ok=True)
                    raise
            elif os.fstat(self.fd).st_size != file_size:
                raise ValueError(f"{path}: size {os.fstat(self.fd).st_size} != configured {file_size}")
            self.mm = mmap.mmap(self.fd, file_size)
        except BaseException:
            if self.fd >= 0:
                os.close(self.fd)
            raise
        if created and warm:
            # Touch one byte per page through the mapping (RocketMQ's warmMappedFile).
            np.frombuffer(self.mm, dtype=np.uint8)[::PAGE_SIZE_BYTES] = 0
        self.wrote_position = 0
        self.flushed_position = 0
        self.populated_position = 0
        # Held while pages are populated, by the writer or the warming thread, and by close():
        # the mapping is never unmapped under a madvise running without the GIL.
        self.populate_lock = threading.Lock()
        self._address = _mapping_address(self.mm)
        self.warm_mark = 0  # a writer past this wakes the warm-ahead thread (WarmAheadService)
        self.write_error: OSError | None = None
        self.created = created

    # -- positions -----------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def set_positions(self, position: int) -> None:
        self.wrote_position = position
        self.flushed_position = position

    # -- I/O ------------------------------------------------------------------------------
    def populate_ahead(self, end: int) -> None:
        """Fault in the pages up to ``end`` plus a chunk beyond (call before writing there)."""
        self.populate_to(max(end, self.populated_position + POPULATE_CHUNK_BYTES))
        if self.populated_position < min(end, self.file_size) and self.write_error is not None:
            raise self.write_error

    def populate_to(self, target: int) -> int:
        """Fault in the pages up to ``target`` (page-rounded, capped at the file size); returns
        the populated position. Called by the writer and by the warming thread
        (:class:`WarmAheadService`); a failure other than "not supported" becomes the file's
        sticky write error."""
        global _populate_supported
        with self.populate_lock:
            if self.mm is None:  # closed meanwhile
                return self.populated_position
            start = self.populated_position
            stop = min(self.file_size, -(-min(target, self.file_size) // PAGE_SIZE_BYTES) * PAGE_SIZE_BYTES)
            if stop <= start:
                return start
            if _populate_supported:
                try:
                    self._madvise_populate(start, stop - start)
                except OSError as exc:
                    if exc.errno == 22:  # EINVAL: an older kernel; pages fault in on first write
                        _populate_supported = False
                    else:
                        self.write_error = exc
                        return start
            self.populated_position = stop
            return stop

    def _madvise_populate(self, start: int, length: int) -> None:
        madvise = _MADVISE
        if self._address is None or madvise is None:  # (an address is taken only with libc's madvise)
            self.mm.madvise(MADV_POPULATE_WRITE, start, length)
            return
        if madvise(self._address + start, length, MADV_POPULATE_WRITE) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))

    def check_writable(self) -> None:
        if self.write_error is not None:
            raise self.write_error

    def flush(self) -> int:
        """fdatasync everything written so far; returns the new flushed position."""
        if self.write_error is not None:
            # After a failed fdatasync the kernel may have dropped the dirty pages: a later
            # successful call proves nothing about them, so the error stays.
            raise self.write_error
        target = self.wrote_position
        if target <= self.flushed_position:
            return self.flushed_position
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            self.write_error = exc
            raise
        self.flushed_position = target
        return target

    def read(self, position: int, size: int) -> bytes:
        return self.mm[position : position + size]

    def zero(self, start: int, end: int) -> None:
        """Overwrite [start, end) with zeros (used after truncating a torn tail)."""
        if end > start:
            self.mm[start:end] = bytes(end - start)

    def close(self) -> None:
        with self.populate_lock:  # waits for a warming madvise on this mapping to end
            if self.mm is not None:
                try:
                    self.mm.close()
                except BufferError:
                    # A reader still holds a view of the mapping; it is released when the view dies.
                    log.warning("%s: mapping still referenced at close", self.path)
                self.mm = None  # type: ignore[assignment]
                self._address = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class MappedFileQueue:
    """The ordered files of one directory; finds, creates, flushes, truncates and deletes them.

    Appends and truncation are serialised by the owner (CommitLog put lock, reput thread);
    readers may look files up concurrently (the list is replaced, never mutated in place).
    """

    def __init__(self, directory: Path, file_size: int, warm: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        self.warm = warm
        self.files: list[MappedFile] = []
        self.flushed_where = 0

    def load(self) -> None:
        """Map every file in the directory (all treated as full until recovery sets positions)."""
        if not self.directory.exists():
            return
        names = sorted(p.name for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        files = []
        for i, name in enumerate(names):
            path = self.directory / name
            size = path.stat().st_size
            if size == 0 and i == len(names) - 1:
                log.warning("deleting empty last file %s", path)
                path.unlink()
                continue
            if size != self.file_size:
                raise ValueError(f"{path}: length {size} != configured file size {self.file_size}")
            mf = MappedFile(path, self.file_size, int(name))
            mf.set_positions(self.file_size)
            files.append(mf)
        self.files = files
        if files:
            self.flushed_where = files[0].file_from_offset

    # -- lookup ---------------------------------------------------------------------------
    @property
    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """End of written data (next append offset)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    def find_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_end_offset:
                return mf
        return None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create the file starting at ``start_offset`` and append it to the queue."""
        assert start_offset % self.file_size == 0, start_offset
        self.directory.mkdir(parents=True, exist_ok=True)
        mf = MappedFile(
            self.directory / offset_to_file_name(start_offset), self.file_size, start_offset, warm=self.warm
        )
        fsync_dir(self.directory)  # the new name must survive a crash before any ack
        if not self.files:
            self.flushed_where = start_offset
        self.files = self.files + [mf]
        return mf

    def last_file_for_append(self) -> MappedFile:
        """The file new data goes to, created (or rolled) as needed."""
        last = self.last_file
        if last is None:
            return self.create_file(0)
        if last.is_full:
            return self.create_file(last.file_end_offset)
        return last

    # -- flush ----------------------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        """Flush from ``flushed_where``; returns True when something was flushed.

        With ``least_pages`` > 0 only flush when that many whole pages are dirty (or the
        file is full), like RocketMQ's flushLeastPages.
        """
        flushed_any = False
        while True:
            mf = self.find_by_offset(self.flushed_where)
            if mf is None:
                return flushed_any
            if least_pages > 0 and not mf.is_full:
                dirty_pages = mf.wrote_position // PAGE_SIZE_BYTES - mf.flushed_position // PAGE_SIZE_BYTES
                if dirty_pages < least_pages:
                    return flushed_any
            before = mf.flushed_position
            position = mf.flush()
            flushed_any = flushed_any or position > before
            self.flushed_where = mf.file_from_offset + position
            if not mf.is_full or mf is self.last_file:
                return flushed_any

    def flush_behind_bytes(self) -> int:
        return max(0, self.max_offset - self.flushed_where)

    # -- truncation and deletion ------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (bytes in the kept file are not zeroed)."""
        kept = []
        for mf in self.files:
            if mf.file_end_offset <= offset:
                kept.append(mf)
            elif mf.file_from_offset <= offset:
                mf.set_positions(offset - mf.file_from_offset)
                kept.append(mf)
            else:
                mf.destroy()
        self.files = kept
        self.flushed_where = min(self.flushed_where, offset) if kept else 0

    def delete_first_files(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest files (never the last one); returns them destroyed."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        doomed, self.files = self.files[:count], self.files[count:]
        for mf in doomed:
            mf.destroy()
        return doomed

    def total_size_bytes(self) -> int:
        return len(self.files) * self.file_size

    def close(self) -> None:
        for mf in self.files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        try:
            self.directory.rmdir()
        except OSError:
            pass


class WarmAheadService:
    """Keeps the last file of a queue populated ``ahead_bytes`` past its write position, on its
    own thread, so the page faults (zeroing, extent work) run beside the GIL-bound writer
    rather than in it, as RocketMQ's AllocateMappedFileService warms files beside its writer.

    The writer calls :meth:`wake` once it passes ``MappedFile.warm_mark`` (half the distance
    used up); pages it reaches before the warmer it still populates itself (``populate_ahead``).
    """

    name = "warm-ahead"

    def __init__(self, mfq: MappedFileQueue, ahead_bytes: int) -> None:
        self.mfq = mfq
        self.ahead_bytes = ahead_bytes
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        self._wake.set()

    def run_once(self) -> int:
        """Populate the last file up to its write position plus ``ahead_bytes``; returns bytes done."""
        mf = self.mfq.last_file
        if mf is None or mf.is_full:
            return 0
        target = min(mf.file_size, mf.wrote_position + self.ahead_bytes)
        done = 0
        while not self._stopped and mf.write_error is None and mf.populated_position < target:
            before = mf.populated_position  # chunk by chunk: close() waits for one chunk at most
            after = mf.populate_to(min(target, before + POPULATE_CHUNK_BYTES))
            if after <= before:
                break
            done += after - before
        mf.warm_mark = mf.populated_position - self.ahead_bytes // 2
        return done

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self.wake()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                self.run_once()
            except Exception:  # the writer populates for itself; never stop warming for good
                log.exception("warm-ahead failed")

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    halt = stop
