"""The broker groups a broker serves, and the route of each topic over them (issue 17).

Where routes come from. With etcd (``etcd_endpoints``), ``<prefix>/routes/topics/<topic>``
(services/coordination/route_view.py, written by ``pyrmq topic create``) names the groups of a
topic, with their read and write queue counts and permission. A topic with no route there,
and every topic without etcd, lives on the *home* group alone (``broker_name``, the group the
broker follows): its route is made from that group's topic config, so a one-group cluster
works exactly as before issue 17.

Auto-created topics (``auto_create_topic_enable``). With etcd, a topic no group holds is
placed on every group of the cluster, with its route (``place``: the
placement ``pyrmq topic create`` uses), as RocketMQ's brokers each create an unknown topic a
producer sends them through TBW102's route, which names every broker; if that fails (a group
down), it is created on the home group alone, as without etcd. A topic already held by the
home group without a route stays there.

A group's core is made on first use: a route that names a group the broker has not met yet
makes its ``BrokerGroupCore`` (broker_group_core.py), connected through ``connect`` (with etcd: a
store client following that group's master). Nothing is moved or renumbered when a group joins.

Receipt handles. The store's handles do not say which group they came from, and the broker
keeps no table of them (any broker of the cluster may get the ack), so a handle from a group
other than the home group is handed out as ``<broker group>/<store handle>`` (group names contain
no ``/`` and the store's handles are URL-safe Base64, which has none either); a handle without
``/`` is the home group's. Every broker of a cluster must therefore have the same
``broker_name``, as ``pyrmq up`` and the compose file give them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from services.broker import validation
from services.broker.broker_group_core import BrokerGroupCore
from services.broker.errors import Code, RequestError
from services.coordination.route_view import RouteStore
from services.domain.routes import QueueData, TopicRoute
from services.store.client.client import StoreClient

log = logging.getLogger(__name__)

HANDLE_SEPARATOR = "/"
BROKER_GROUPS_MAX = 1024  # a route naming more groups than this is refused (a limit: conventions rule 7)


class RouteSource(Protocol):
    """The topic routes the broker reads (services/coordination/route_view.py: ``RouteView``)."""

    def route(self, topic: str) -> TopicRoute | None: ...


@dataclass(frozen=True)
class ClusterView:
    """What a broker of several broker groups reads from etcd: the topic routes, a client for
    any group, where routes are changed (admin) and the groups registered."""

    routes: RouteSource
    connect: Callable[[str], StoreClient]
    route_store: RouteStore | None = None  # None: routes are read-only here
    registered_broker_groups: Callable[[], list[str]] = list


class NoRoutes:
    """Without etcd: no topic has a route; every topic is the home group's."""

    def route(self, topic: str) -> TopicRoute | None:
        return None


class BrokerGroups:
    """Every ``BrokerGroupCore`` of this broker, by group name; the home group always exists."""

    def __init__(
        self,
        home: BrokerGroupCore,
        make: Callable[[str], BrokerGroupCore],
        routes: RouteSource | None = None,
        place: Callable[[str], TopicRoute] | None = None,
    ) -> None:
        """``place``: auto-create a topic on every group of the cluster (the topic's name -> its
        route, written to etcd) rather than on the home group alone; None without etcd."""
        self.home = home
        self._make = make  # group name -> a new core (connects a store client; starts nothing)
        self._routes = routes or NoRoutes()
        self._cores: dict[str, BrokerGroupCore] = {home.name: home}
        self._place = place
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    # -- cores -----------------------------------------------------------------------------------
    def cores(self) -> list[BrokerGroupCore]:
        return list(self._cores.values())

    def core(self, name: str) -> BrokerGroupCore:
        """The group's core ("": the home group's); BAD_REQUEST for a group this broker has not
        met (a client's made-up broker name must not make the broker connect anywhere)."""
        core = self._cores.get(name or self.home.name)
        if core is not None:
            return core
        raise RequestError(f"broker group {name!r} is not in any route this broker knows", Code.BAD_REQUEST)

    def known(self, name: str) -> BrokerGroupCore | None:
        return self._cores.get(name)

    def attach(self, name: str) -> BrokerGroupCore:
        """The group's core, connecting to the group first if this broker has not met it (a
        route names it, or an operator places a topic on it)."""
        core = self._cores.get(name)
        if core is not None:
            return core
        with self._lock:
            core = self._cores.get(name)
            if core is None:
                if len(self._cores) >= BROKER_GROUPS_MAX:
                    raise RequestError(f"more than {BROKER_GROUPS_MAX} broker groups", Code.INTERNAL_SERVER_ERROR)
                log.info("broker group %s: first seen in a route, connecting", name)
                core = self._make(name)
                if self._started and not self._closed:
                    core.start()
                self._cores = {**self._cores, name: core}  # readers take the dict without the lock
        return core

    def up(self, name: str) -> bool:
        core = self._cores.get(name)
        return core is not None and core.up

    def start(self) -> None:
        with self._lock:
            self._started = True
            cores = self.cores()
        for core in cores:
            core.start()

    def close_services(self) -> None:
        for core in self.cores():
            core.close_services()

    def stop_threads(self) -> None:
        """Stop every group's arrival watch and renewer (before the gRPC server stops)."""
        with self._lock:
            self._closed = True
            cores = self.cores()
        for core in cores:
            core.stop_threads()

    def close_sinks(self) -> None:
        """Drain every group's send queue (after the gRPC server stopped)."""
        for core in self.cores():
            core.sink.close()

    # -- routes ----------------------------------------------------------------------------------
    def route(self, topic: str, create: bool | None = None) -> TopicRoute:
        """The topic's route, its groups' cores made; ILLEGAL_TOPIC, TOPIC_NOT_FOUND."""
        validation.validate_topic(topic)
        route = self._routes.route(topic)
        if route is None or not route.queue_datas:
            route = self._placed(topic, create)
        if route is None:
            info = self.home.topics.get(topic, create=create)
            return TopicRoute(
                info.name,
                info.message_type,
                (QueueData(self.home.name, info.read_queue_nums, info.write_queue_nums, info.perm),),
            )
        for queue_data in route.queue_datas:
            self.attach(queue_data.broker_name)
        return route

    def has_route(self, topic: str) -> bool:
        route = self._routes.route(topic)
        return route is not None and bool(route.queue_datas)

    def routed(self, topic: str) -> bool:
        """Whether sends to the topic go by a route over groups: it has one, or auto-create
        would place it on every group now."""
        return self.has_route(topic) or self._would_place(topic, None)

    def _would_place(self, topic: str, create: bool | None) -> bool:
        enabled = create if create is not None else self.home.topics.auto_create_enabled
        return self._place is not None and enabled and self.home.topics.find(topic) is None

    def _placed(self, topic: str, create: bool | None) -> TopicRoute | None:
        """An unknown topic placed on every group (auto-create with etcd); None otherwise, or
        if placing failed (then it is created on the home group alone)."""
        place = self._place
        if place is None or not self._would_place(topic, create):
            return None
        try:
            return place(topic)
        except Exception as exc:  # noqa: BLE001 - a group down: the home group alone, as without etcd
            log.warning("auto-creating topic %s on every broker group failed (%s); creating it here only", topic, exc)
            return None

    # -- receipt handles -------------------------------------------------------------------------
    def outer_handle(self, broker_group: str, handle: str) -> str:
        return handle if broker_group == self.home.name or not handle else f"{broker_group}{HANDLE_SEPARATOR}{handle}"

    def inner_handle(self, handle: str) -> tuple[BrokerGroupCore, str]:
        """(the group's core, the store's handle); INVALID_RECEIPT_HANDLE for an unknown group."""
        broker_group, separator, inner = handle.partition(HANDLE_SEPARATOR)
        if not separator:
            return self.home, handle
        core = self._cores.get(broker_group)
        if core is None:
            raise RequestError(f"receipt handle of unknown broker group {broker_group!r}", Code.INVALID_RECEIPT_HANDLE)
        return core, inner
