"""Topic routes in etcd (issue 17): ``<prefix>/routes/topics/<topic>`` holds the topic's
``TopicRoute`` (services/domain/routes.py: RocketMQ's QueueData per broker group, JSON), the
same etcd and prefix as the replica sets' keys (group_keys.py), so every broker and every admin
command reads one truth.

* ``RouteStore``: read a route, and change it by compare-and-swap on the key's mod revision
  (``update``: read, apply a function, write only if nobody wrote in between, else again), so
  two admins adding groups to one topic at once both land.
* ``RouteView``: every route, read once and then kept current by a watch (a ``PrefixView``,
  as ``RoleView`` is for a group's roles). Good for routing, not for fencing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.coordination.group_keys import DEFAULT_PREFIX
from services.coordination.prefix_view import PrefixView
from services.domain.routes import TopicRoute
from services.runtime.etcd import Compare, Delete, EtcdError, Event, Get, KeyValue, Put
from services.runtime.etcd.rpc.client import EtcdClient

log = logging.getLogger(__name__)

UPDATE_ATTEMPTS = 16

Change = Callable[[TopicRoute | None], TopicRoute | None]


def routes_prefix(prefix: str = DEFAULT_PREFIX) -> bytes:
    return f"{prefix}/routes/topics/".encode()


def route_key(topic: str, prefix: str = DEFAULT_PREFIX) -> bytes:
    if not topic or "/" in topic:
        raise ValueError(f"topic {topic!r}: must be non-empty and contain no '/'")
    return routes_prefix(prefix) + topic.encode()


def registered_groups(etcd: EtcdClient, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Every broker group that has keys in etcd (group_keys.py: a replica ever registered), sorted."""
    root = f"{prefix}/groups/".encode()
    result = etcd.txn([], [Get(root, prefix=True)])
    return sorted({kv.key[len(root) :].split(b"/", 1)[0].decode() for kv in result.results[0].kvs})


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


class RouteView(PrefixView[dict[str, TopicRoute]]):
    """Every topic's route (``routes``: topic -> TopicRoute, a new dict per change), kept
    current by a watch (prefix_view.py); ``open`` follows it on a thread of its own."""

    def __init__(self, etcd: EtcdClient, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(etcd, routes_prefix(prefix), {}, "the routes")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self, wait_s: float) -> bool:
        """Start following the routes; True once the first read is in, within ``wait_s``
        (False: etcd has not answered yet; the thread keeps trying)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.follow, args=(self._stopping,), name="route-view", daemon=True)
            self._thread.start()
        return self.loaded.wait(wait_s)

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self.stop()

    @property
    def routes(self) -> dict[str, TopicRoute]:
        return self.state

    def route(self, topic: str) -> TopicRoute | None:
        return self.state.get(topic)

    def read(self, kvs: tuple[KeyValue, ...], revision: int) -> dict[str, TopicRoute]:
        routes: dict[str, TopicRoute] = {}
        for kv in kvs:
            self._fold(routes, kv, deleted=False)
        return routes

    def apply(self, state: dict[str, TopicRoute], events: list[Event]) -> dict[str, TopicRoute]:
        routes = dict(state)
        for event in events:
            self._fold(routes, event.kv, deleted=event.type == "DELETE")
        return routes

    def _fold(self, routes: dict[str, TopicRoute], kv: KeyValue, deleted: bool) -> None:
        topic = kv.key[len(self.prefix) :].decode()
        if deleted:
            routes.pop(topic, None)
            return
        try:
            routes[topic] = TopicRoute.decode(kv.value)
        except ValueError as exc:
            log.error("route of %s in etcd does not decode (%s); ignored", topic, exc)
