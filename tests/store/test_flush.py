"""When CommitLog bytes reach the disk (docs/store-files.md, section 6; docs/durability.md, section 1).

* SYNC: a put returns PUT_OK only once an fdatasync covers its bytes, and concurrent puts share
  fdatasyncs (group commit).
* ASYNC: FlushService.run_once flushes only when at least flush_least_pages pages are dirty
  (or a segment is full), everything once flush_thorough_interval_ms has passed on the clock,
  and records the flushed offset in the checkpoint.
* A failed fdatasync is sticky: no put on that segment is ever acknowledged afterwards.

fdatasync calls are counted (or failed) by wrapping ``os.fdatasync``, which the mapped files
call through the ``os`` module.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time

import pytest

from services.domain.format.checkpoint_format import CHECKPOINT_FILE_SIZE_BYTES, decode_checkpoint
from services.domain.statuses import PutStatus
from services.store.config import FlushMode
from services.store.log.flush import FlushService
from services.store.log.mapped_file import PAGE_SIZE_BYTES
from services.store.store import FileStore
from tests.support.filestore import message
from tests.support.waits import wait_until

log = logging.getLogger(__name__)

WRITERS = 32
PUTS_PER_WRITER = 50
SLOW_FDATASYNC_S = 0.005
PUTS_PER_FLUSH_MIN = 8  # on average, with 32 writers and a 5 ms fdatasync
LEAST_PAGES = 4
THOROUGH_MS = 10_000
NEVER_MS = 3_600_000  # background loops that must not run during a test


class FdatasyncSpy:
    """Wraps os.fdatasync: counts calls on CommitLog segments, optionally slows or fails them."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.real = os.fdatasync
        self.commitlog_calls = 0
        self.delay_s = 0.0
        self.fail_with: OSError | None = None
        self._lock = threading.Lock()

    def _is_commitlog(self, fd: int) -> bool:
        return any(mf.fd == fd for mf in self.store.commitlog.mfq.files)

    def __call__(self, fd: int) -> None:
        if self._is_commitlog(fd):
            with self._lock:
                self.commitlog_calls += 1
            if self.fail_with is not None:
                raise self.fail_with
            if self.delay_s:
                time.sleep(self.delay_s)  # a slow disk: the fdatasync takes this long
        self.real(fd)


@pytest.fixture
def spy_on(make_store, monkeypatch):
    """Set up after make_store, so the patch is undone before the stores shut down."""

    def install(store: FileStore) -> FdatasyncSpy:
        spy = FdatasyncSpy(store)
        monkeypatch.setattr(os, "fdatasync", spy)
        return spy

    return install


def put_one(store: FileStore, body: bytes, **props):
    [result] = store.put_messages([message(body=body, **props)])
    return result


# -- SYNC: group commit ----------------------------------------------------------------------


def test_sync_puts_share_fdatasyncs_and_return_only_once_flushed(make_store, spy_on):
    store = make_store(FlushMode.SYNC)
    spy = spy_on(store)
    # A disk whose fdatasync takes 5 ms (the VM's takes well under 1 ms, where how many puts
    # a flush covers depends more on the GIL than on the group commit).
    spy.delay_s = SLOW_FDATASYNC_S
    start = threading.Barrier(WRITERS)
    problems: list[str] = []
    results: list = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        start.wait()
        for i in range(PUTS_PER_WRITER):
            [r] = store.put_messages([message(queue_id=w % 8, body=b"w%02d-%03d-" % (w, i) + b"x" * 200)])
            flushed = store.commitlog.flushed_where  # read right after the put returned
            with lock:
                results.append(r)
                if r.status is not PutStatus.PUT_OK:
                    problems.append(f"writer {w} put {i}: {r.status.name} {r.error}")
                elif r.phy_offset + r.wrote_bytes > flushed:
                    problems.append(
                        f"writer {w} put {i}: acknowledged [{r.phy_offset}, "
                        f"{r.phy_offset + r.wrote_bytes}) but flushed_where is {flushed}"
                    )

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - t0
    assert not any(t.is_alive() for t in threads)
    puts = WRITERS * PUTS_PER_WRITER
    assert not problems, problems[:20]
    assert len(results) == puts
    assert len(store.commitlog.mfq.files) > 1  # segments rolled under the group commit
    log.info(
        "group commit: %d puts, %d fdatasyncs, %d group flushes, %.2f s",
        puts,
        spy.commitlog_calls,
        store.group_commit.flush_count,
        elapsed,
    )
    # Group commit: one flush covers every put waiting for it.
    assert spy.commitlog_calls > 0 and store.group_commit.flush_count > 0
    assert spy.commitlog_calls <= puts // PUTS_PER_FLUSH_MIN, (
        f"{spy.commitlog_calls} fdatasyncs for {puts} puts in {elapsed:.2f} s: flushes are not shared"
    )
    assert store.group_commit.flush_count <= puts // PUTS_PER_FLUSH_MIN
    # Every acknowledged record reads back (dense offsets per queue, intact bodies).
    store.reput.run_once()
    for q in range(8):
        got = store.get_messages("TopicTest", q, 0, max_count=1000, max_bytes=1 << 30)
        assert [m.queue_offset for m in got.messages] == list(range(WRITERS // 8 * PUTS_PER_WRITER))
    bodies = sorted(
        m.body[:7]
        for q in range(8)
        for m in store.get_messages("TopicTest", q, 0, max_count=1000, max_bytes=1 << 30).messages
    )
    assert bodies == sorted(b"w%02d-%03d" % (w, i) for w in range(WRITERS) for i in range(PUTS_PER_WRITER))


def test_sync_put_with_wait_false_does_not_wait_for_the_flush(make_store, spy_on):
    store = make_store(FlushMode.SYNC)
    spy = spy_on(store)
    spy.delay_s = 0.3  # a slow disk: a put that waited for the flush would take this long
    t0 = time.monotonic()
    r = put_one(store, b"fire and forget", WAIT="false")
    assert time.monotonic() - t0 < spy.delay_s / 2
    assert r.status is PutStatus.PUT_OK
    r2 = put_one(store, b"waits")
    assert r2.status is PutStatus.PUT_OK
    assert store.commitlog.flushed_where >= r2.phy_offset + r2.wrote_bytes > r.phy_offset


# -- ASYNC: FlushService ---------------------------------------------------------------------


@pytest.fixture
def async_store(make_store):
    """An ASYNC store whose own background flusher never runs; the test drives a FlushService."""
    return make_store(
        FlushMode.ASYNC,
        flush_interval_ms=NEVER_MS,
        flush_least_pages=LEAST_PAGES,
        flush_thorough_interval_ms=THOROUGH_MS,
    )


def flush_service(store: FileStore, clock) -> FlushService:
    return FlushService(store.commitlog, store.checkpoint, clock, NEVER_MS, LEAST_PAGES, THOROUGH_MS)


def grow_to(store: FileStore, end_offset: int) -> None:
    """Append messages until the CommitLog's max offset reaches at least ``end_offset``."""
    while store.commitlog.max_offset < end_offset:
        size = min(2000, max(1, end_offset - store.commitlog.max_offset))
        assert put_one(store, b"p" * size).status is PutStatus.PUT_OK


def test_async_flush_waits_for_least_pages(async_store, clock, spy_on):
    store = async_store
    spy = spy_on(store)
    flusher = flush_service(store, clock)
    cp = store.checkpoint.current
    flushed_cp_before = cp.flushed_phy_offset
    grow_to(store, 3 * PAGE_SIZE_BYTES + 100)  # three whole pages dirty (and part of a fourth)
    assert store.commitlog.max_offset < LEAST_PAGES * PAGE_SIZE_BYTES
    assert flusher.run_once() == 0
    assert store.commitlog.flushed_where == 0 and spy.commitlog_calls == 0
    assert cp.flushed_phy_offset == flushed_cp_before

    clock.advance_ms(THOROUGH_MS - 1)  # not yet thorough
    assert flusher.run_once() == 0 and spy.commitlog_calls == 0

    grow_to(store, LEAST_PAGES * PAGE_SIZE_BYTES)
    end = store.commitlog.max_offset
    assert flusher.run_once() == end
    assert store.commitlog.flushed_where == end and spy.commitlog_calls == 1
    assert cp.flushed_phy_offset == end
    assert cp.physic_msg_timestamp == store.commitlog.last_store_timestamp_ms
    assert flusher.run_once() == 0 and spy.commitlog_calls == 1  # nothing new: no syscall


def test_async_thorough_interval_flushes_a_single_dirty_byte(async_store, clock, spy_on):
    store = async_store
    spy = spy_on(store)
    flusher = flush_service(store, clock)
    r = put_one(store, b"tiny")
    assert flusher.run_once() == 0 and store.commitlog.flushed_where == 0
    clock.advance_ms(THOROUGH_MS)
    assert flusher.run_once() == r.phy_offset + r.wrote_bytes
    assert store.commitlog.flushed_where == store.commitlog.max_offset
    assert store.checkpoint.current.flushed_phy_offset == store.commitlog.max_offset
    assert spy.commitlog_calls == 1
    # The thorough clock restarted: the next small write waits again.
    put_one(store, b"tiny again")
    assert flusher.run_once() == 0
    clock.advance_ms(THOROUGH_MS)
    assert flusher.run_once() > 0 and store.commitlog.flushed_where == store.commitlog.max_offset


def test_async_a_full_segment_is_flushed_whatever_its_dirty_pages(async_store, clock):
    store = async_store
    flusher = flush_service(store, clock)
    segment = store.config.commitlog_file_size_bytes
    grow_to(store, segment + 10)  # rolls: the first segment is full, the second has < 1 page
    files = store.commitlog.mfq.files
    assert len(files) == 2 and files[0].is_full
    assert files[1].wrote_position < PAGE_SIZE_BYTES
    assert flusher.run_once() == segment
    assert store.commitlog.flushed_where == segment  # the full one, not the new one's tail
    assert store.checkpoint.current.flushed_phy_offset == segment


def test_async_flushed_offset_reaches_the_checkpoint_file(async_store, clock):
    store = async_store
    flusher = flush_service(store, clock)
    grow_to(store, 6 * PAGE_SIZE_BYTES)
    end = flusher.run_once()
    assert end == store.commitlog.max_offset
    # The ConsumeQueue flush service persists the checkpoint (every 50 ms in small_config).

    def flushed_on_disk() -> int:
        with open(store.config.checkpoint_path, "rb") as f:
            return decode_checkpoint(f.read(CHECKPOINT_FILE_SIZE_BYTES)).flushed_phy_offset

    wait_until(flushed_on_disk, 10, f"the checkpoint on disk flushed to {end}", accept=lambda flushed: flushed == end)


# -- a failed fdatasync is sticky ------------------------------------------------------------


def test_sync_failed_fdatasync_is_never_acknowledged_and_is_sticky(make_store, spy_on):
    store = make_store(FlushMode.SYNC)
    spy = spy_on(store)
    good = put_one(store, b"before the fault")
    assert good.status is PutStatus.PUT_OK

    spy.fail_with = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    failed = put_one(store, b"flush fails")
    assert failed.status is not PutStatus.PUT_OK, failed
    assert store.commitlog.flushed_where <= failed.phy_offset
    assert store.commitlog.mfq.last_file.write_error is not None

    spy.fail_with = None  # space is back: the segment still refuses (its pages' fate is unknown)
    later = [put_one(store, b"after the fault %d" % i) for i in range(5)]
    later += store.put_messages([message(body=b"batch %d" % i) for i in range(3)])
    later.append(put_one(store, b"no wait", WAIT="false"))
    assert all(r.status is not PutStatus.PUT_OK for r in later), [r.status for r in later]
    assert store.commitlog.flushed_where <= failed.phy_offset


def test_async_failed_fdatasync_makes_later_puts_fail(async_store, clock, spy_on):
    store = async_store
    spy = spy_on(store)
    flusher = flush_service(store, clock)
    acked = put_one(store, b"in the page cache")
    assert acked.status is PutStatus.PUT_OK  # ASYNC acks before the flush
    spy.fail_with = OSError(errno.EIO, os.strerror(errno.EIO))
    clock.advance_ms(THOROUGH_MS)
    with pytest.raises(OSError):
        flusher.run_once()
    assert store.commitlog.flushed_where == 0
    spy.fail_with = None
    later = [put_one(store, b"after %d" % i) for i in range(3)]
    assert all(r.status is not PutStatus.PUT_OK for r in later), [r.status for r in later]
