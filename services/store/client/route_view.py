"""Topic routes in etcd (issue 17): ``<prefix>/routes/topics/<topic>`` holds the topic's
``TopicRoute`` (services/domain/routes.py: RocketMQ's QueueData per broker group, JSON), the
same etcd and prefix as the replica sets' keys (group_keys.py), so every broker and every admin
command reads one truth.

* ``RouteStore``: read a route, and change it by compare-and-swap on the key's mod revision
  (``update``: read, apply a function, write only if nobody wrote in between, else again), so
  two admins adding groups to one topic at once both land.
* ``RouteView``: every route, read once and then kept current by a watch from the next
  revision (as ``RoleView`` does for a group's roles); a watch that ends for good is
  re-established by ``run_once``. Good for routing, not for fencing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.domain.routes import TopicRoute
from services.runtime.etcd import Compare, Delete, EtcdError, Event, Get, KeyValue, Put
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.etcd.rpc.streams import Watcher
from services.store.client.group_keys import DEFAULT_PREFIX

log = logging.getLogger(__name__)

UPDATE_ATTEMPTS = 16

Change = Callable[[TopicRoute | None], TopicRoute | None]


def routes_prefix(prefix: str = DEFAULT_PREFIX) -> bytes:
    return f"{prefix}/routes/topics/".encode()


def route_key(topic: str, prefix: str = DEFAULT_PREFIX) -> bytes:
    if not topic or "/" in topic:
        raise ValueError(f"topic {topic!r}: must be non-empty and contain no '/'")
    return routes_prefix(prefix) + topic.encode()


class RouteConflictError(EtcdError):
    """A route kept changing under ``update`` (more than UPDATE_ATTEMPTS writers at once)."""


class RouteStore:
    def __init__(self, etcd: EtcdClient, prefix: str = DEFAULT_PREFIX) -> None:
        self.etcd = etcd
        self.prefix = prefix

    def get(self, topic: str) -> TopicRoute | None:
        kv = self.etcd.get(route_key(topic, self.prefix))
        return TopicRoute.decode(kv.value) if kv is not None else None

    def update(self, topic: str, change: Change) -> TopicRoute | None:
        """Apply ``change`` to the topic's route (None: it has none) and store what it returns
        (None: delete the route) atomically against concurrent updates; returns the result."""
        key = route_key(topic, self.prefix)
        for _ in range(UPDATE_ATTEMPTS):
            kv = self.etcd.get(key)
            current = TopicRoute.decode(kv.value) if kv is not None else None
            wanted = change(current)
            if wanted is not None and wanted.topic != topic:
                raise ValueError(f"a route of topic {wanted.topic} stored under {topic}")
            if wanted == current:
                return current
            compare = Compare.mod_revision(key, kv.mod_revision) if kv is not None else Compare.version(key, 0)
            op = Put(key, wanted.encode()) if wanted is not None else Delete(key)
            if self.etcd.txn([compare], [op]).succeeded:
                return wanted
        raise RouteConflictError(f"the route of {topic} changed {UPDATE_ATTEMPTS} times while being updated")


Listener = Callable[[dict[str, TopicRoute]], None]


class RouteView:
    """Every topic's route, kept current by a watch; ``routes`` is a read-only snapshot."""

    def __init__(self, etcd: EtcdClient, prefix: str = DEFAULT_PREFIX) -> None:
        self.etcd = etcd
        self.prefix = routes_prefix(prefix)
        self._routes: dict[str, TopicRoute] = {}
        self._listeners: list[Listener] = []
        self._watcher: Watcher | None = None
        self._broken = False
        self._changed = threading.Condition()

    @property
    def routes(self) -> dict[str, TopicRoute]:
        return self._routes

    def route(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self) -> RouteView:
        if self._watcher is not None:
            return self
        result = self.etcd.txn([], [Get(self.prefix, prefix=True)])
        routes: dict[str, TopicRoute] = {}
        for kv in result.results[0].kvs:
            self._apply(routes, kv, deleted=False)
        self._set(routes)
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

    def wait_for(self, predicate: Callable[[dict[str, TopicRoute]], bool], timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._routes), timeout_s)

    def _apply(self, routes: dict[str, TopicRoute], kv: KeyValue, deleted: bool) -> None:
        topic = kv.key[len(self.prefix) :].decode()
        if deleted:
            routes.pop(topic, None)
            return
        try:
            routes[topic] = TopicRoute.decode(kv.value)
        except ValueError as exc:
            log.error("route of %s in etcd does not decode (%s); ignored", topic, exc)

    def _on_events(self, events: list[Event]) -> None:
        routes = dict(self._routes)
        for event in events:
            self._apply(routes, event.kv, deleted=event.type == "DELETE")
        self._set(routes)

    def _on_error(self, exc: Exception) -> None:
        log.warning("the routes watch ended (%s); re-reading", exc)
        self._broken = True

    def _set(self, routes: dict[str, TopicRoute]) -> None:
        with self._changed:
            self._routes = routes
            self._changed.notify_all()
        for listener in self._listeners:
            try:
                listener(routes)
            except Exception:
                log.exception("a route listener failed")
