"""Who is master of a group, as seen through an etcd watch (``RoleView``).

The view is one read of the group's keys at a revision, then a watch from the next revision, so
it sees every change once and in order; brokers, the scheduler, txcheck and slaves will follow
the master through it. A watch that ends for good (its revision compacted) is re-established
from a fresh read by ``run_once()``. The view may lag etcd by the watch's delivery time: it is
good for routing, never for fencing, which is the transactions' and the lease's job
(controller.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.runtime.etcd import Event, Get
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.etcd.rpc.streams import Watcher
from services.store.client.group_keys import GroupKeys
from services.store.client.group_state import GroupState

log = logging.getLogger(__name__)

Listener = Callable[[GroupState, GroupState], None]


class RoleView:
    """A group's master, masterEpoch, SyncStateSet and live replicas, kept current by a watch.
    ``state`` is an immutable GroupState; listeners get (old, new) after each change, on the
    watch's thread, and must not block."""

    def __init__(self, etcd: EtcdClient, keys: GroupKeys) -> None:
        self.etcd = etcd
        self.keys = keys
        self._state = GroupState(keys)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._watcher: Watcher | None = None
        self._broken = False
        self._changed = threading.Condition(self._lock)

    @property
    def state(self) -> GroupState:
        return self._state

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self) -> RoleView:
        """Reads the group and watches it from the revision after the read."""
        if self._watcher is not None:
            return self
        result = self.etcd.txn([], [Get(self.keys.root, prefix=True)])
        self._set(GroupState.from_kvs(self.keys, result.results[0].kvs, result.revision))
        self._watcher = Watcher(
            self.etcd,
            self.keys.root,
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

    def wait_for(self, predicate: Callable[[GroupState], bool], timeout_s: float) -> bool:
        """Blocks until ``predicate(state)`` holds or ``timeout_s`` passes (for callers that
        need a change seen before going on: tests, a planned switch)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._state), timeout_s)

    def _on_events(self, events: list[Event]) -> None:
        self._set(self._state.apply(events))

    def _on_error(self, exc: Exception) -> None:
        log.warning("group %s: the watch ended (%s); re-reading", self.keys.group, exc)
        self._broken = True

    def _set(self, new: GroupState) -> None:
        with self._changed:
            old, self._state = self._state, new
            self._changed.notify_all()
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:
                log.exception("group %s: a role listener failed", self.keys.group)
