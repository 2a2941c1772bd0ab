"""Reput: tail the CommitLog and hand each record to the dispatchers.

``ReputService.run_once()`` dispatches everything between ``reput_from_offset`` and the
CommitLog's max offset (or the ``limit`` below it), in batches: each dispatcher gets a list of
DispatchRequests, then the arrival bus gets one Arrival per queue that grew. The thread sleeps
on a condition that ``notify_append()`` signals after each put, so it never polls.

``limit`` (a callable answering None: no limit) is RocketMQ's confirmOffset when reads must not
see uncommitted data (``readUnCommitted`` false): a controller-mode master dispatches only what
every member of its SyncStateSet confirmed (``ha/ha_service.HAService.commit_offset``), so no consumer, scheduler
or transaction checker reads a message a failover could take back. It is re-read on every
``notify_append``, which the master calls when a slave's ack moves it. It is always a record
boundary (the master's end, or an offset a slave confirmed: slaves append whole records).

Invariant: ``commitlog.min_offset <= reput_from_offset <= commitlog.max_offset`` and
reput_from_offset is always a record (or blank record, or file) boundary.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import operator
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from services.store.arrivals import ArrivalBus
from services.store.log.commitlog import CommitLog
from services.store.model import Arrival, DispatchRequest

log = logging.getLogger(__name__)

DISPATCH_BATCH_MAX = 4096
RETRY_AFTER_OS_ERROR_S = 1.0  # a dispatch that met ENOSPC or EIO is tried again after this
_SIZE = operator.attrgetter("size")


def _no_limit() -> int | None:
    return None


class Dispatcher(Protocol):
    def dispatch(self, requests: list[DispatchRequest]) -> None: ...


class ReputService:
    def __init__(
        self,
        commitlog: CommitLog,
        dispatchers: list[Dispatcher],
        arrivals: ArrivalBus,
        queue_max_offset: Callable[[str, int], int],
        reput_from_offset: int,
        limit: Callable[[], int | None] = _no_limit,
    ) -> None:
        self._commitlog = commitlog
        self._dispatchers = dispatchers
        self._arrivals = arrivals
        self._queue_max_offset = queue_max_offset
        self._reput_from_offset = reput_from_offset
        self._dispatch_lock = threading.Lock()  # held while dispatching; retention takes it too
        self._cond = threading.Condition()
        self._pending = False
        self._stopped = False
        # One run_once at a time (the thread, start-up, tests); reentrant, so a CommitLog
        # truncation can hold it (``paused``) and still redispatch.
        self._run_lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._limit = limit  # how far dispatch may go (None: the CommitLog's end)

    @property
    def reput_from_offset(self) -> int:
        """Where dispatch goes on: everything before it is in the ConsumeQueues and IndexFile."""
        return self._reput_from_offset

    @property
    def dispatch_lock(self) -> threading.Lock:
        """Held while a batch is dispatched (and reput_from_offset moves past it)."""
        return self._dispatch_lock

    @property
    def error(self) -> BaseException | None:
        """What stopped the reput thread, or the OSError its last try met (it tries again)."""
        return self._error

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self._commitlog.max_offset - self._reput_from_offset)

    def notify_append(self) -> None:
        if self._pending:
            return  # a wake-up is already on its way; it will see this append too
        with self._cond:
            self._pending = True
            self._cond.notify()

    def _next_batch(self, end: int) -> tuple[list[DispatchRequest], int]:
        """Up to DISPATCH_BATCH_MAX requests from reput_from_offset, and the offset after them."""
        commitlog = self._commitlog
        backlog = commitlog.dispatch_backlog
        batch: list[DispatchRequest] = []
        offset = self._reput_from_offset
        while offset < end and len(batch) < DISPATCH_BATCH_MAX:
            while backlog and backlog[0].phy_offset < offset:
                backlog.popleft()  # recorded before a restart of reput from an earlier point
            if backlog and backlog[0].phy_offset == offset:
                taken = self._take_run(backlog, offset, end, DISPATCH_BATCH_MAX - len(batch))
                if taken:
                    batch += taken
                    tail = taken[-1]
                    offset = tail.phy_offset + tail.size
                    continue
                head = backlog.popleft()
                batch.append(head)
                offset += head.size
                continue
            req, size = commitlog.dispatch_request_at(offset)
            if req is not None:
                batch.append(req)
                offset += size
            elif size == 0:
                offset = commitlog.roll_next_file(offset)  # blank record: next segment
            elif size > 0:
                log.error("skipping %d bytes of a malformed record at phy_offset %d", size, offset)
                offset += size
            else:
                break  # no valid record yet (should not happen below max_offset)
        return batch, offset

    @staticmethod
    def _take_run(
        backlog: collections.deque[DispatchRequest], offset: int, end: int, limit: int
    ) -> list[DispatchRequest]:
        """Pop the backlog's head run in one go: the records from ``offset`` that end by ``end``,
        when they are contiguous (the usual case: one segment, appended in order). Otherwise
        put everything back and return [] (the record-by-record loop handles segment ends).

        The writer appends to the right of the deque meanwhile, so it is never iterated: items
        are popped from the left (reput is the only one taking from there) and put back there.
        """
        count = min(limit, len(backlog))
        if count < 2:
            return []
        popleft = backlog.popleft
        run = [popleft() for _ in range(count)]
        keep = count
        while keep and run[keep - 1].phy_offset + run[keep - 1].size > end:
            keep -= 1  # appended after ``end`` was read: for the next round
        if keep < 2 or sum(map(_SIZE, run[:keep])) != run[keep - 1].phy_offset + run[keep - 1].size - offset:
            backlog.extendleft(reversed(run))  # a gap or a segment end: the careful loop decides
            return []
        if keep < count:
            backlog.extendleft(reversed(run[keep:]))
            del run[keep:]
        return run

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No dispatch runs inside (a batch read before is dispatched before it begins)."""
        with self._run_lock:
            yield

    def reset_reput_from_offset(self, offset: int) -> None:
        """Restart dispatch at ``offset`` (a record boundary), as RocketMQ's setReputFromOffset
        after a truncation. The caller holds ``paused()`` and ``dispatch_lock`` (and the put lock:
        the CommitLog's ends stand still)."""
        commitlog = self._commitlog
        assert commitlog.min_offset <= offset <= commitlog.max_offset, (
            offset,
            commitlog.min_offset,
            commitlog.max_offset,
        )
        self._reput_from_offset = offset

    def run_once(self) -> int:
        """Dispatch everything available now; returns the number of records dispatched."""
        with self._run_lock:
            return self._run_once_locked()

    def redispatch(self, from_offset: int, dispatchers: list[Dispatcher], until: int | None = None) -> int:
        """Dispatch everything from ``from_offset`` into ``dispatchers`` only (rebuilding them
        from the CommitLog; the other dispatchers keep what they hold). Returns the count.
        With ``until`` (a record boundary), stop there and leave reput where it was: a
        dispatcher that is behind the others catches up with them."""
        with self._run_lock:
            saved, saved_from = self._dispatchers, self._reput_from_offset
            self._dispatchers = dispatchers
            self._reput_from_offset = from_offset
            try:
                return self._run_once_locked(until)
            finally:
                self._dispatchers = saved
                if until is not None:
                    self._reput_from_offset = saved_from

    def _run_once_locked(self, until: int | None = None) -> int:
        total = 0
        commitlog = self._commitlog
        while True:
            if self._reput_from_offset < commitlog.min_offset:
                # Retention deleted segments before they were dispatched (RocketMQ's doReput
                # clamps the same way): continue at the oldest segment still there.
                log.warning(
                    "reput from %d is below the CommitLog min offset %d; skipping ahead",
                    self._reput_from_offset,
                    commitlog.min_offset,
                )
                self._reput_from_offset = commitlog.min_offset
            end = self._end() if until is None else min(until, commitlog.max_offset)
            if self._reput_from_offset >= end:
                return total
            batch, offset = self._next_batch(end)
            # reput_from_offset moves only once the batch is in the ConsumeQueues and IndexFile,
            # so whoever reads it under dispatch_lock (the checkpoint) never runs ahead of them.
            with self._dispatch_lock:
                for dispatcher in self._dispatchers:
                    dispatcher.dispatch(batch)
                moved = offset != self._reput_from_offset
                self._reput_from_offset = offset
            if batch:
                self._announce(batch)
                total += len(batch)
            elif not moved:
                return total

    def _end(self) -> int:
        """Where dispatch may go now: the CommitLog's end, or the limit below it."""
        end = self._commitlog.max_offset
        limit = self._limit()
        return end if limit is None else min(end, limit)

    def _announce(self, batch: list[DispatchRequest]) -> None:
        if not self._arrivals.has_listeners:
            return
        last: dict[tuple[str, int], int] = {}
        lite: dict[str, tuple[int, int]] = {}  # a lite topic's queue (LMQ queue 0): its end and store time
        for req in batch:
            if req.sys_flag & 0xC in (0x0, 0x8):
                last[(req.topic, req.queue_id)] = req.store_timestamp_ms
                if req.lmq:
                    lite[req.lmq] = (req.lmq_offset + 1, req.store_timestamp_ms)
        queue_max_offset = self._queue_max_offset
        arrivals = [Arrival(t, q, queue_max_offset(t, q), ts) for (t, q), ts in last.items()]
        arrivals += [Arrival(lmq, 0, end, ts) for lmq, (end, ts) in lite.items()]
        self._arrivals.publish(arrivals)

    # -- thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reput", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait(1.0)
                    if self._end() > self._reput_from_offset:
                        break
                if self._stopped:
                    return
                self._pending = False
            try:
                self.run_once()
                self._error = None
            except OSError as exc:
                # A full disk (a new ConsumeQueue or IndexFile file: ENOSPC) or an I/O error: the
                # batch is not marked dispatched, so it is dispatched again (every dispatcher takes
                # a batch twice, as after a restart) once the next try works, e.g. when space is
                # back; stopping here instead left acknowledged messages unreadable until a
                # restart (found by the netns faults: a replica's disk filled to the last byte).
                self._error = exc
                log.error(
                    "reput failed at phy_offset %d: %s; retrying in %.0f s",
                    self._reput_from_offset,
                    exc,
                    RETRY_AFTER_OS_ERROR_S,
                )
                with self._cond:
                    self._pending = True
                    self._cond.wait(RETRY_AFTER_OS_ERROR_S)
            except BaseException as exc:  # keep the error visible; the store reports it
                self._error = exc
                log.exception("reput failed at phy_offset %d", self._reput_from_offset)
                return

    def halt(self) -> None:
        self.stop()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
