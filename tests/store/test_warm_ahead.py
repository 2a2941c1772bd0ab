"""Pages populated ahead of the CommitLog writer, and the reput's whole-run pop of its backlog.

* ``MappedFile.populate_to`` faults pages in (MADV_POPULATE_WRITE, through ctypes so the GIL is
  free meanwhile), page-rounded and capped at the file size; ``close`` waits for it.
* ``WarmAheadService.run_once`` keeps the last CommitLog file populated ``warm_ahead_bytes``
  past its write position; the writer wakes it once it passes ``warm_mark``.
* ``ReputService._take_run`` pops a contiguous run from the dispatch backlog in one go, and
  nothing when the run has a gap or ends past the end offset (the record loop decides then).
"""

from __future__ import annotations

import collections
import threading

from services.store.log.mapped_file import PAGE_SIZE_BYTES, MappedFile, MappedFileQueue, WarmAheadService
from services.store.log.reput import ReputService
from services.store.model import DispatchRequest
from tests.support.filestore import message

FILE_SIZE = 1 << 20


def test_populate_to_rounds_to_pages_and_stops_at_the_file_end(tmp_path):
    mf = MappedFile(tmp_path / "00000000000000000000", FILE_SIZE, 0)
    try:
        assert mf.populate_to(1) == PAGE_SIZE_BYTES
        assert mf.populate_to(PAGE_SIZE_BYTES) == PAGE_SIZE_BYTES  # nothing more to do
        assert mf.populate_to(10 * PAGE_SIZE_BYTES + 5) == 11 * PAGE_SIZE_BYTES
        assert mf.populate_to(FILE_SIZE * 4) == FILE_SIZE
        assert mf.write_error is None
        mf.mm[FILE_SIZE - 3 :] = b"end"  # populated pages are writable through the mapping
        assert mf.read(FILE_SIZE - 3, 3) == b"end"
    finally:
        mf.close()
    assert mf.populate_to(FILE_SIZE) == FILE_SIZE  # after close: no madvise on a dead mapping


def test_close_waits_for_a_running_populate(tmp_path):
    mf = MappedFile(tmp_path / "00000000000000000000", FILE_SIZE, 0)
    mf.populate_lock.acquire()  # as if the warm-ahead thread were inside madvise
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (mf.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.2)
    assert mf.mm is not None
    mf.populate_lock.release()
    closer.join(5)
    assert closed.is_set() and mf.mm is None


def test_warm_ahead_keeps_the_last_file_populated_past_the_writer(tmp_path):
    mfq = MappedFileQueue(tmp_path / "commitlog", FILE_SIZE)
    mf = mfq.create_file(0)
    warm = WarmAheadService(mfq, ahead_bytes=256 * 1024)
    try:
        assert warm.run_once() == 256 * 1024
        assert mf.populated_position == 256 * 1024
        assert mf.warm_mark == 128 * 1024  # the writer wakes the warmer half-way through
        mf.wrote_position = 200 * 1024
        assert warm.run_once() == 200 * 1024
        assert mf.populated_position == 456 * 1024
        mf.wrote_position = FILE_SIZE - 10
        warm.run_once()
        assert mf.populated_position == FILE_SIZE  # never past the file
        mf.wrote_position = FILE_SIZE
        assert warm.run_once() == 0  # a full file is left alone
    finally:
        mfq.close()


def test_puts_wake_the_warmer_which_stays_ahead_of_the_commitlog(make_store):
    store = make_store(commitlog_file_size_bytes=4 << 20, warm_ahead_bytes=512 * 1024)
    woken = []
    wake = store.commitlog.on_populate_low
    assert wake is not None
    store.commitlog.on_populate_low = lambda: (woken.append(1), wake())
    body = b"x" * 1000
    for _ in range(40):
        store.put_messages([message(body=body) for _ in range(32)])
    mf = store.commitlog.mfq.last_file
    assert woken, "the writer never woke the warm-ahead thread"
    assert len(woken) < 40  # once per warming round, not once per put
    for _ in range(200):  # the warmer runs on its own thread
        if mf.populated_position >= min(mf.file_size, mf.wrote_position + 256 * 1024):
            break
        threading.Event().wait(0.01)
    assert mf.populated_position >= min(mf.file_size, mf.wrote_position + 256 * 1024)
    assert [m.body for m in (store.reput.run_once(), store.get_messages("TopicTest", 0, 0, 32))[1].messages] == [
        body
    ] * 32


def test_no_warmer_when_warm_ahead_is_off(make_store):
    store = make_store(warm_ahead_bytes=0)
    assert store.commitlog.on_populate_low is None
    store.put_messages([message()])
    assert (store.reput.run_once(), store.get_messages("TopicTest", 0, 0, 1))[1].messages[0].body == b"hello"


def _request(phy_offset: int, size: int) -> DispatchRequest:
    return DispatchRequest("T", 0, phy_offset, size, 0, 0, 0, "", "", 0, 0)


def test_take_run_pops_a_contiguous_run_and_nothing_otherwise():
    run = [_request(100, 10), _request(110, 20), _request(130, 5)]
    backlog = collections.deque(run)
    assert ReputService._take_run(backlog, 100, 135, 4096) == run
    assert not backlog
    gap = collections.deque([_request(100, 10), _request(120, 20)])  # 110..120 is not in the backlog
    assert ReputService._take_run(gap, 100, 140, 4096) == [] and len(gap) == 2
    beyond = collections.deque(run)  # the last record ends past what is readable: left for later
    assert ReputService._take_run(beyond, 100, 134, 4096) == run[:2] and list(beyond) == run[2:]
    short = collections.deque(run)
    assert ReputService._take_run(short, 100, 111, 4096) == [] and list(short) == run
    limited = collections.deque(run)
    assert ReputService._take_run(limited, 100, 135, 2) == run[:2] and list(limited) == run[2:]


def test_reput_keeps_up_with_writers_appending_meanwhile(make_store):
    """Reput pops runs while writer threads append to the same backlog (a tiny switch interval
    interleaves the Python steps; a switch inside a C-level iteration of the deque, the race the
    first version had, is not reproduced here). Every record is dispatched once, in order."""
    import sys

    store = make_store(commitlog_file_size_bytes=1 << 20)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:

        def writer(queue_id: int) -> None:
            for i in range(150):
                store.put_messages([message(queue_id=queue_id, body=b"%d" % i) for _ in range(3)])

        threads = [threading.Thread(target=writer, args=(q,)) for q in range(4)]
        for t in threads:
            t.start()
        for _ in range(200):
            store.reput.run_once()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    store.reput.run_once()
    assert store.reput.error is None
    for queue_id in range(4):
        got = store.get_messages("TopicTest", queue_id, 0, 500).messages
        assert [m.body for m in got] == [b"%d" % i for i in range(150) for _ in range(3)]
        assert [m.queue_offset for m in got] == list(range(450))
