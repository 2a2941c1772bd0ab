"""Topics over broker groups for operators (issue 17): ``pyrmq topic create T --queues 8
--groups g1,g2``, as ``mqadmin updateTopic -c Cluster -w 8 -r 8`` does.

Creating (or updating) a topic on several groups is two steps:

1. the topic's config in each named group's store (``AdminService.create_topic`` there, so a
   group's store holds the topic before any route points a send at it); queue ids start at 0
   in each group;
2. the route in etcd (services/coordination/route_view.py): each named group's ``QueueData``
   (its read and write queue counts and permission, as stored) added or replaced by
   compare-and-swap, so concurrent admins never drop each other's groups; groups the call did
   not name keep their place.

If a store refuses, the route is not touched: a retry of the same command finishes the job
(both steps are create-or-update). Without etcd there is one group, the broker's own, and no
route: a topic is its config in that store, as before issue 17.

The default set of groups ("every group of the cluster") is every group registered in etcd
(``registered_broker_groups``), else the home group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.broker.admin import AdminService
from services.broker.broker_groups import BrokerGroups
from services.broker.errors import Code, RequestError
from services.coordination.route_view import RouteStore
from services.domain.retry_policy import GroupRetryPolicy
from services.domain.routes import QueueData, TopicRoute
from services.store.client.model import GroupInfo, TopicInfo

log = logging.getLogger(__name__)

BROKER_GROUPS_PER_TOPIC_MAX = 256


@dataclass(frozen=True, slots=True)
class PlacedTopic:
    topic: TopicInfo  # as stored in the first group (the type and counts are the same in all)
    created: bool  # new in at least one group
    broker_groups: tuple[str, ...]  # every group of the topic's route after the call


class TopicPlacement:
    def __init__(
        self,
        broker_groups: BrokerGroups,
        routes: RouteStore | None,
        registered_broker_groups: Callable[[], list[str]],
    ) -> None:
        self._broker_groups = broker_groups
        self._routes = routes
        self._registered_broker_groups = registered_broker_groups

    def route_broker_groups(self, name: str) -> tuple[str, ...]:
        """The groups holding the topic: its route's, else the home group."""
        route = self._routes.get(name) if self._routes is not None else None
        return tuple(route.groups) if route is not None and route.queue_datas else (self._broker_groups.home.name,)

    def create(
        self,
        name: str,
        message_type: str,
        queue_nums: int,
        broker_groups: Sequence[str],
        attributes: dict[str, str] | None = None,
    ) -> PlacedTopic:
        targets = self._targets(name, broker_groups)
        if self._routes is None:
            topic, created = self._admin(self._broker_groups.home.name).create_topic(
                name, message_type, queue_nums, attributes
            )
            return PlacedTopic(topic, created, (self._broker_groups.home.name,))
        stored: list[tuple[str, TopicInfo]] = []
        any_created = False
        for broker_group in targets:
            topic, created = self._admin(broker_group).create_topic(name, message_type, queue_nums, attributes)
            message_type = message_type or topic.message_type  # the first group's decides the others'
            stored.append((broker_group, topic))
            any_created = any_created or created

        def change(route: TopicRoute | None) -> TopicRoute:
            route = route or TopicRoute(name, stored[0][1].message_type)
            for broker_group, topic in stored:
                route = route.with_group(
                    QueueData(broker_group, topic.read_queue_nums, topic.write_queue_nums, topic.perm)
                )
            return TopicRoute(route.topic, stored[0][1].message_type, route.queue_datas)

        route = self._routes.update(name, change)
        assert route is not None
        for broker_group, _ in stored:
            self._broker_groups.attach(broker_group).topics.invalidate(name)
        log.info("topic %s on groups %s (route: %s)", name, ", ".join(targets), ", ".join(route.groups))
        return PlacedTopic(stored[0][1], any_created, tuple(route.groups))

    def place_route(self, name: str, message_type: str, queue_nums: int) -> TopicRoute:
        """Create the topic on every group of the cluster (auto-create) and return its route."""
        self.create(name, message_type, queue_nums, ())
        route = self._routes.get(name) if self._routes is not None else None
        if route is None or not route.queue_datas:
            raise RequestError(f"topic {name}: no route after placing it", Code.INTERNAL_SERVER_ERROR)
        return route

    def delete(self, name: str) -> bool:
        """Delete the topic from every group of its route, then the route; whether it existed."""
        existed = False
        for broker_group in self.route_broker_groups(name):
            core = self._broker_groups.attach(broker_group)
            existed = core.store.delete_topic(name) or existed
            core.topics.invalidate(name)
        if self._routes is not None:
            self._routes.update(name, lambda route: None)
        return existed

    def list_topics(self, include_system: bool = False) -> list[tuple[TopicInfo, tuple[str, ...]]]:
        """Every topic of every group, sorted by name, with the groups whose store holds it."""
        found: dict[str, tuple[TopicInfo, list[str]]] = {}
        for broker_group in self.cluster_broker_groups():
            for topic in self._admin(broker_group).list_topics(include_system):
                found.setdefault(topic.name, (topic, []))[1].append(broker_group)
        return [
            (topic, tuple(broker_groups))
            for topic, broker_groups in sorted(found.values(), key=lambda item: item[0].name)
        ]

    def create_group(
        self,
        name: str,
        fifo: bool | None,
        max_delivery_attempts: int,
        policy: GroupRetryPolicy | None,
        must_exist: bool,
        attributes: dict[str, str] | None = None,
        removed_attributes: Sequence[str] = (),
    ) -> tuple[GroupInfo, bool]:
        """A consumer group's settings in every broker group's store (a consumer may receive
        from any of them); the first group's answer."""
        results = [
            self._admin(broker_group).create_group(
                name, fifo, max_delivery_attempts, policy, must_exist, attributes, removed_attributes
            )
            for broker_group in self.cluster_broker_groups()
        ]
        return results[0]

    def cluster_broker_groups(self) -> list[str]:
        """Every broker group of the cluster: those registered in etcd, else the home group."""
        registered = self._registered_broker_groups() if self._routes is not None else []
        return sorted(registered) or [self._broker_groups.home.name]

    @property
    def home_broker_group(self) -> str:
        return self._broker_groups.home.name

    def admin(self, broker_group: str) -> AdminService:
        """The admin calls on one group's store."""
        return self._admin(broker_group)

    def _admin(self, broker_group: str) -> AdminService:
        core = self._broker_groups.attach(broker_group)
        return AdminService(core.store, core.topics.invalidate, lambda: core.store.address)

    def _targets(self, name: str, broker_groups: Sequence[str]) -> list[str]:
        if not broker_groups:
            return self.cluster_broker_groups()
        targets = sorted(set(broker_groups))
        if len(targets) > BROKER_GROUPS_PER_TOPIC_MAX:
            raise RequestError(f"at most {BROKER_GROUPS_PER_TOPIC_MAX} broker groups per topic, not {len(targets)}")
        for broker_group in targets:
            if not broker_group or "/" in broker_group:
                raise RequestError(f"broker group name {broker_group!r}: must be non-empty and contain no '/'")
        if self._routes is None and targets != [self._broker_groups.home.name]:
            raise RequestError(
                f"this broker serves broker group {self._broker_groups.home.name} only (no etcd_endpoints): "
                f"cannot place topic {name} on {', '.join(targets)}",
                Code.BAD_REQUEST,
            )
        return targets
