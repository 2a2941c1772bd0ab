"""Flush services: when CommitLog bytes reach the disk.

* ``FlushService`` (ASYNC_FLUSH): every ``flush_interval_ms`` fdatasync the CommitLog when at
  least ``flush_least_pages`` pages are dirty, and everything every
  ``flush_thorough_interval_ms``. A put returns once its bytes are in the page cache, so
  kill -9 loses nothing; a power loss may lose the last flush window.
* ``GroupCommitService`` (SYNC_FLUSH): a put waits until an fdatasync covers its end offset.
  One flush thread serves all waiters: whoever arrives while a flush runs is covered by the
  next one (group commit). A wait longer than ``sync_flush_timeout_ms`` ends in a timeout,
  never in OK.
* ``ConsumeQueueFlushService``: every ``flush_consume_queue_interval_ms`` flush ConsumeQueues
  and the IndexFile, then record in the checkpoint the reput offset captured *before* that
  flush, so recovery re-dispatches from a point whose derived data is surely on disk.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.runtime.clock import Clock
from services.store.log.checkpoint import CheckpointFile
from services.store.log.commitlog import CommitLog

log = logging.getLogger(__name__)


class _Loop:
    """A background loop calling ``run_once`` every ``interval_s`` until stopped."""

    name = "loop"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.exception("%s failed", self.name)

    def stop(self) -> None:
        self.halt()

    def halt(self) -> None:
        """Stop the thread without any final work (a crash, for tests)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


class PeriodicTask(_Loop):
    """Runs ``task`` every ``interval_ms`` (e.g. persisting consumer offsets)."""

    def __init__(self, name: str, interval_ms: int, task: Callable[[], object]) -> None:
        super().__init__(interval_ms / 1000)
        self.name = name
        self.task = task

    def run_once(self) -> int:
        self.task()
        return 1

    def stop(self) -> None:
        super().stop()
        self.task()


class FlushService(_Loop):
    name = "flush-commitlog"

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: CheckpointFile,
        clock: Clock,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.clock = clock
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough_ms = clock.now_ms()

    def run_once(self) -> int:
        now = self.clock.now_ms()
        least = self.least_pages
        if now - self._last_thorough_ms >= self.thorough_interval_ms:
            least = 0
            self._last_thorough_ms = now
        before = self.commitlog.flushed_where
        stamp = self.commitlog.last_store_timestamp_ms
        self.commitlog.flush(least)
        flushed = self.commitlog.flushed_where - before
        if flushed:
            with self.checkpoint.lock:  # read under the lock: never a value from before a truncation
                cp = self.checkpoint.current
                cp.physic_msg_timestamp = stamp
                cp.flushed_phy_offset = self.commitlog.flushed_where
                # Never durable past the log's end (recovery trusts what lies below it).
                assert cp.flushed_phy_offset <= self.commitlog.max_offset, cp.flushed_phy_offset
        return flushed

    def stop(self) -> None:
        super().stop()
        for _ in range(10):  # shutdown: retry a full flush (RocketMQ tries 10 times)
            try:
                self.commitlog.flush(0)
                break
            except OSError:
                log.exception("final flush failed")


class GroupCommitService:
    """Makes a put wait until an fdatasync covers it; one flush serves every waiter.

    Each waiter parks on its own Event (no notify_all herd): the flush thread swaps the request
    list, fdatasyncs once, then wakes exactly the waiters whose end offset is now durable.
    """

    def __init__(self, commitlog: CommitLog, checkpoint: CheckpointFile, timeout_ms: int) -> None:
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.timeout_s = timeout_ms / 1000
        self._lock = threading.Lock()
        self._requests: list[tuple[int, threading.Event]] = []
        self._wakeup = threading.Event()
        self._flushed = commitlog.flushed_where
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.flush_count = 0
        self.error: OSError | None = None

    def wait_for_flush(self, end_offset: int) -> bool:
        """Block until ``end_offset`` is durable; False on timeout, I/O error or shutdown."""
        if self._flushed >= end_offset:
            return True
        done = threading.Event()
        with self._lock:
            if self.error is not None or self._stopped:
                return False
            self._requests.append((end_offset, done))
        self._wakeup.set()
        done.wait(self.timeout_s)
        return self._flushed >= end_offset and self.error is None

    def run_once(self) -> int:
        """One group flush of everything written so far; returns bytes newly made durable."""
        with self._lock:
            requests, self._requests = self._requests, []
        before = self.commitlog.flushed_where
        stamp = self.commitlog.last_store_timestamp_ms
        try:
            self.commitlog.flush(0)
        except OSError as exc:
            self.error = exc
            for _, done in requests:
                done.set()
            raise
        after = self.commitlog.flushed_where
        self._flushed = after
        self.flush_count += 1
        pending = []
        for end_offset, done in requests:
            if end_offset <= after:
                done.set()
            else:
                pending.append((end_offset, done))  # appended after the flush began: next round
        if pending:
            with self._lock:
                self._requests = pending + self._requests
            self._wakeup.set()
        if after > before:
            with self.checkpoint.lock:  # read under the lock: never a value from before a truncation
                cp = self.checkpoint.current
                cp.physic_msg_timestamp = stamp
                cp.flushed_phy_offset = min(after, self.commitlog.flushed_where)
        return after - before

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wakeup.wait(1.0)
            self._wakeup.clear()
            if self._stopped:
                return
            if not self._requests:
                continue
            try:
                self.run_once()
            except OSError:
                log.exception("group commit flush failed; the store refuses further SYNC puts")
                return

    def halt(self) -> None:
        self._stopped = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            requests, self._requests = self._requests, []
        for _, done in requests:
            done.set()

    def stop(self) -> None:
        self.halt()
        try:
            self.commitlog.flush(0)
        except OSError:
            log.exception("final flush failed")


class ConsumeQueueFlushService(_Loop):
    name = "flush-consumequeue"

    def __init__(
        self,
        interval_ms: int,
        dispatched_state: Callable[[], tuple[int, int]],
        flush_derived: Callable[[], None],
        checkpoint: CheckpointFile,
        logics_timestamp: Callable[[], int],
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.dispatched_state = dispatched_state
        self.flush_derived = flush_derived
        self.checkpoint = checkpoint
        self.logics_timestamp = logics_timestamp

    def run_once(self) -> int:
        # Captured before the flush: everything below it is on disk after the flush. The
        # checkpoint lock keeps a CommitLog truncation out of the whole round.
        with self.checkpoint.lock:
            dispatched, cq_sum = self.dispatched_state()
            stamp = self.logics_timestamp()
            self.flush_derived()
            cp = self.checkpoint.current
            moved = dispatched - max(cp.dispatched_phy_offset, 0)
            cp.dispatched_phy_offset = dispatched
            cp.cq_max_offset_sum = cq_sum
            cp.logics_msg_timestamp = stamp
            self.checkpoint.save()
        return moved
