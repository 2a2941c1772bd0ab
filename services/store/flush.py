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
from typing import Callable

from services.store.checkpoint import CheckpointFile
from services.store.clock import Clock
from services.store.commitlog import CommitLog

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

    def __init__(self, name: str, interval_ms: int, task: Callable[[], None]) -> None:
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

    def __init__(self, commitlog: CommitLog, checkpoint: CheckpointFile, clock: Clock,
                 interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
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
            cp = self.checkpoint.current
            cp.physic_msg_timestamp = stamp
            cp.flushed_phy_offset = self.commitlog.flushed_where
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
    """Makes a put wait until an fdatasync covers it; one flush serves every waiter."""

    def __init__(self, commitlog: CommitLog, checkpoint: CheckpointFile, timeout_ms: int) -> None:
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.timeout_s = timeout_ms / 1000
        self._cond = threading.Condition()
        self._requested = 0          # highest end offset anyone waits for
        self._flushed = commitlog.flushed_where
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.flush_count = 0
        self.error: OSError | None = None

    def wait_for_flush(self, end_offset: int) -> bool:
        """Block until ``end_offset`` is durable; False on timeout, I/O error or shutdown."""
        with self._cond:
            if self._flushed >= end_offset:
                return True
            if end_offset > self._requested:
                self._requested = end_offset
                self._cond.notify_all()
            ok = self._cond.wait_for(
                lambda: self._flushed >= end_offset or self.error is not None or self._stopped,
                timeout=self.timeout_s)
            return ok and self._flushed >= end_offset

    def run_once(self) -> int:
        """One group flush of everything written so far; returns bytes newly made durable."""
        before = self.commitlog.flushed_where
        stamp = self.commitlog.last_store_timestamp_ms
        try:
            self.commitlog.flush(0)
        except OSError as exc:
            with self._cond:
                self.error = exc
                self._cond.notify_all()
            raise
        after = self.commitlog.flushed_where
        with self._cond:
            self._flushed = after
            self.flush_count += 1
            self._cond.notify_all()
        if after > before:
            cp = self.checkpoint.current
            cp.physic_msg_timestamp = stamp
            cp.flushed_phy_offset = after
        return after - before

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._flushed or self._stopped, timeout=1.0)
                if self._stopped:
                    return
                if self._requested <= self._flushed:
                    continue
            try:
                self.run_once()
            except OSError:
                log.exception("group commit flush failed; the store refuses further SYNC puts")
                return

    def halt(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def stop(self) -> None:
        self.halt()
        try:
            self.commitlog.flush(0)
        except OSError:
            log.exception("final flush failed")


class ConsumeQueueFlushService(_Loop):
    name = "flush-consumequeue"

    def __init__(self, interval_ms: int, reput_offset: Callable[[], int],
                 flush_derived: Callable[[], None], checkpoint: CheckpointFile,
                 logics_timestamp: Callable[[], int]) -> None:
        super().__init__(interval_ms / 1000)
        self.reput_offset = reput_offset
        self.flush_derived = flush_derived
        self.checkpoint = checkpoint
        self.logics_timestamp = logics_timestamp

    def run_once(self) -> int:
        dispatched = self.reput_offset()   # captured before the flush: everything below is on disk after it
        stamp = self.logics_timestamp()
        self.flush_derived()
        cp = self.checkpoint.current
        moved = dispatched - max(cp.dispatched_phy_offset, 0)
        cp.dispatched_phy_offset = dispatched
        cp.logics_msg_timestamp = stamp
        self.checkpoint.save()
        return moved
