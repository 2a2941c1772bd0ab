"""SchedulerService: the scheduler's threads around the two cores (no gRPC here).

| thread | owns |
|---|---|
| ``timer`` | ``TimerStore``: enqueue, dequeue, flush, checkpoint, TimerLog cleanup |
| ``delay-levels`` | ``DelayLevelService``: SCHEDULE_TOPIC_XXXX delivery and the delay offsets |
| ``arrival-watch`` | the store's WatchArrivals stream; only sets the two loops' wake events |

No lock is shared between the loops: each core is touched by its own thread only (``stats``
reads integers, which the GIL keeps whole). A failed store call backs the loop off for
``store_retry_backoff_ms``; its state is unchanged, so the next pass retries the same work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.domain.names import SCHEDULE_TOPIC, TIMER_TOPIC
from services.runtime.clock import Clock, SystemClock
from services.scheduler.check_files import DelayCheckFile, SchedulerLock
from services.scheduler.config import SchedulerConfig
from services.scheduler.delay_level import DelayLevelService
from services.scheduler.store_access import ArrivalWatch, SchedulerStore
from services.scheduler.timer_stats import SchedulerStats
from services.scheduler.timer_store import TimerStore
from services.store.client.errors import StoreError

log = logging.getLogger(__name__)

STOP_JOIN_TIMEOUT_S = 10.0
ERROR_LOG_INTERVAL_S = 10.0  # repeated store failures are logged at most this often per loop


class SchedulerService:
    def __init__(
        self,
        config: SchedulerConfig,
        store: SchedulerStore,
        clock: Clock | None = None,
        watch: ArrivalWatch | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self._store = store
        self._watch = watch
        self.timer = TimerStore(config, self.clock, store, arrivals_watched=watch is not None)
        self._lock: SchedulerLock | None = None
        self._delay_check: DelayCheckFile | None = None
        self.delay: DelayLevelService | None = None
        self._stopped = threading.Event()
        self._timer_wake = threading.Event()
        self._delay_wake = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> None:
        """Lock the directory and recover the files (no store call yet)."""
        self.config.root.mkdir(parents=True, exist_ok=True)
        self._lock = SchedulerLock(self.config.lock_path)
        try:
            self.timer.open()
            self._delay_check = DelayCheckFile(self.config.delaycheck_path)
            self.delay = DelayLevelService(
                self.config, self.clock, self._store, self._delay_check, arrivals_watched=self._watch is not None
            )
        except BaseException:
            self._close_files(flush=False)
            raise

    def start(self) -> None:
        assert self.delay is not None, "open() first"
        self._threads = [
            threading.Thread(target=self._timer_loop, name="timer", daemon=True),
            threading.Thread(target=self._delay_loop, name="delay-levels", daemon=True),
        ]
        if self._watch is not None:
            self._threads.append(threading.Thread(target=self._watch_loop, name="arrival-watch", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the loops, flush and checkpoint, release the directory."""
        self._halt_threads()
        self._close_files(flush=True)

    def halt(self) -> None:
        """Stop as ``kill -9`` would: no flush, no checkpoint (for fault-injection tests)."""
        self._halt_threads()
        self._close_files(flush=False)

    def _halt_threads(self) -> None:
        self._stopped.set()
        self._timer_wake.set()
        self._delay_wake.set()
        if self._watch is not None:
            self._watch.stop_watching()
        for thread in self._threads:
            thread.join(STOP_JOIN_TIMEOUT_S)
            if thread.is_alive():
                log.error("thread %s did not stop in %.0f s", thread.name, STOP_JOIN_TIMEOUT_S)
        self._threads = []

    def _close_files(self, flush: bool) -> None:
        try:
            self.timer.close(flush=flush)
        except Exception:  # keep releasing; the next start recovers
            log.exception("closing the timer files failed")
        if self._delay_check is not None:
            self._delay_check.close()
            self._delay_check = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def stats(self) -> SchedulerStats:
        assert self.delay is not None
        return SchedulerStats(self.timer.stats(), self.delay.stats())

    # -- loops --------------------------------------------------------------------------------
    def _run_loop(
        self, name: str, run_once: Callable[[], int], wait_hint_ms: Callable[[], int], wake: threading.Event
    ) -> None:
        backoff_s = self.config.store_retry_backoff_ms / 1000
        last_error_s = -ERROR_LOG_INTERVAL_S
        while not self._stopped.is_set():
            try:
                if run_once():
                    continue
                wait_s = wait_hint_ms() / 1000
            except StoreError as exc:
                now_s = self.clock.monotonic_s()
                if now_s - last_error_s >= ERROR_LOG_INTERVAL_S:
                    log.warning("%s: %s; retrying every %.1f s", name, exc, backoff_s)
                    last_error_s = now_s
                wait_s = backoff_s
            except Exception:  # a bug: log it, keep the scheduler alive
                log.exception("%s loop iteration failed", name)
                wait_s = backoff_s
            if wait_s > 0:
                wake.wait(wait_s)
            wake.clear()

    def _timer_loop(self) -> None:
        self._run_loop("timer", self.timer.run_once, self.timer.wait_hint_ms, self._timer_wake)

    def _delay_loop(self) -> None:
        assert self.delay is not None
        self._run_loop("delay levels", self.delay.run_once, self.delay.wait_hint_ms, self._delay_wake)

    def _watch_loop(self) -> None:
        assert self._watch is not None and self.delay is not None and self.timer.enqueue is not None
        delay = self.delay
        timer_enqueue = self.timer.enqueue

        def on_arrival(topic: str) -> None:
            if topic == TIMER_TOPIC:
                timer_enqueue.notify_arrival()
                self._timer_wake.set()
            elif topic == SCHEDULE_TOPIC:
                delay.wake()
                self._delay_wake.set()

        def on_arrivals(topics: list[str]) -> None:
            for topic in topics:
                on_arrival(topic)

        def on_restart() -> None:
            on_arrival(TIMER_TOPIC)
            on_arrival(SCHEDULE_TOPIC)

        self._watch.watch_arrivals([TIMER_TOPIC, SCHEDULE_TOPIC], on_arrivals, on_restart, self._stopped)
