"""A state folded from every key under an etcd prefix, kept current by a watch (``PrefixView``):
one read of the prefix at a revision, then a watch from the next revision, so every change is
seen once and in order. A watch that ends for good (its revision compacted) is re-established
from a fresh read by ``run_once()``. What the state is, and how events change it, is the
subclass's (``RoleView``: a group's roles; ``RouteView``: the topic routes). The state may lag
etcd by the watch's delivery time: it is good for routing, never for fencing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from services.runtime.etcd import EtcdError, Event, Get, KeyValue
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.etcd.rpc.streams import Watcher

log = logging.getLogger(__name__)

S = TypeVar("S")


class PrefixView(Generic[S]):
    """``state`` is immutable (a new one per change); listeners get (old, new) after each
    change, on the watch's thread, and must not block."""

    def __init__(self, etcd: EtcdClient, prefix: bytes, initial: S, what: str) -> None:
        self.etcd = etcd
        self.prefix = prefix
        self._state = initial
        self._what = what  # for the log: "group broker-a", "the routes"
        self._listeners: list[Callable[[S, S], None]] = []
        self._watcher: Watcher | None = None
        self._broken = False
        self._changed = threading.Condition()
        self.loaded = threading.Event()  # set once the first read is in ``state``

    # -- what a subclass gives -------------------------------------------------------------------
    def read(self, kvs: tuple[KeyValue, ...], revision: int) -> S:
        """The state from a read of the whole prefix at ``revision``."""
        raise NotImplementedError

    def apply(self, state: S, events: list[Event]) -> S:
        """The state after ``events`` (in order)."""
        raise NotImplementedError

    # -- the view ---------------------------------------------------------------------------------
    @property
    def state(self) -> S:
        return self._state

    def add_listener(self, listener: Callable[[S, S], None]) -> None:
        self._listeners.append(listener)

    def start(self) -> PrefixView[S]:
        """Reads the prefix and watches it from the revision after the read."""
        if self._watcher is not None:
            return self
        result = self.etcd.txn([], [Get(self.prefix, prefix=True)])
        self._set(self.read(result.results[0].kvs, result.revision))
        self.loaded.set()
        self._watcher = Watcher(
            self.etcd,
            self.prefix,
            self._on_events,
            prefix=True,
            start_revision=result.revision + 1,
            on_error=self._on_error,
        ).start()
        return self

    def stop(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()

    def run_once(self) -> None:
        """Re-establishes a watch that ended for good."""
        if self._broken:
            self._broken = False
            self.stop()
            self.start()

    def follow(self, stopping: threading.Event, retry_interval_s: float = 0.2, recheck_s: float = 1.0) -> None:
        """A thread's whole life: read and watch (until etcd answers, again every
        ``retry_interval_s``), then re-establish a watch that ended for good, until ``stopping``."""
        while not stopping.is_set():
            try:
                self.start()
                break
            except EtcdError as exc:
                log.warning("%s: etcd unreachable (%s); retrying", self._what, exc)
                stopping.wait(retry_interval_s)
        while not stopping.wait(recheck_s):
            try:
                self.run_once()
            except EtcdError as exc:
                log.info("%s: re-reading failed: %s", self._what, exc)

    def wait_for(self, predicate: Callable[[S], bool], timeout_s: float) -> bool:
        """Blocks until ``predicate(state)`` holds or ``timeout_s`` passes (for callers that
        need a change seen before going on: tests, a planned switch)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._state), timeout_s)

    def _on_events(self, events: list[Event]) -> None:
        self._set(self.apply(self._state, events))

    def _on_error(self, exc: Exception) -> None:
        log.warning("%s: the watch ended (%s); re-reading", self._what, exc)
        self._broken = True

    def _set(self, new: S) -> None:
        with self._changed:
            old, self._state = self._state, new
            self._changed.notify_all()
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:
                log.exception("%s: a listener failed", self._what)
