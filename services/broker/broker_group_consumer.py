"""Receives, acks, assignments and offsets over several broker groups (issue 17).

What the RocketMQ 5 proxy does in cluster mode, for a stateless broker (broker_groups.py: where
routes come from, and how a receipt handle names its group):

* ReceiveMessage goes to the group of ``message_queue.broker`` (the clients take it from the
  assignment), queue -1 there: every read queue of the topic in that group plus the group's
  retry topic, as with one group. The handles it hands out name the group.
* AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue go to the group
  their receipt handle names; one AckMessage with handles of several groups makes one store
  call per group, and the results come back in the request's order.
* QueryAssignment: one assignment (queue -1) per readable group that is up, or, for a FIFO
  consumer group, one per read queue of each such group (each group's answer is the
  single-group one). A group that is down is left out until it is back; the clients ask again
  every few seconds.
* QueryOffset, PullMessage, UpdateOffset and GetOffset go to the group named in the message
  queue (none: the home group).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

from services.broker.broker_group_core import BrokerGroupCore
from services.broker.broker_groups import BrokerGroups
from services.broker.consumer import ReceiveRequest, ReceiveResult, validate_group
from services.broker.errors import FAILURES, BrokerError, Code, as_broker_error
from services.broker.lite_consumer import LiteConsumer
from services.broker.pull import OffsetPolicy, PullRequest, PullResult
from services.broker.raw_pull import RawPullRequest, RawPullResult, RawPullService
from services.broker.route import Route, RouteQueue

log = logging.getLogger(__name__)


class RoutedConsumer:
    def __init__(self, broker_groups: BrokerGroups, lite: LiteConsumer | None = None) -> None:
        self._broker_groups = broker_groups
        self.lite = lite

    def _receiving_core(self, topic: str, broker_name: str) -> BrokerGroupCore:
        """The named group's core; a name no route gives (a client's own, or none) is the home
        group's, as a one-group broker always answered."""
        if broker_name and broker_name != self._broker_groups.home.name and self._broker_groups.has_route(topic):
            self._broker_groups.route(topic)  # makes the cores of the topic's groups
        return self._broker_groups.known(broker_name) or self._broker_groups.home

    def _handle_core(self, topic: str, handle: str) -> tuple[BrokerGroupCore, str]:
        if handle and "/" in handle and topic:
            try:
                self._broker_groups.route(topic)  # a handle of a group this broker has not met yet
            except BrokerError:
                pass  # the core's own checks answer for the topic
        return self._broker_groups.inner_handle(handle)

    def close(self) -> None:
        if self.lite is not None:
            self.lite.close()
        self._broker_groups.close_services()

    def receive(self, request: ReceiveRequest) -> ReceiveResult:
        if self.lite is not None:
            validate_group(request.group)
            if self.lite.is_lite_topic(request.topic):  # (checks the topic too)
                return self.lite.receive(request)
        core = self._receiving_core(request.topic, request.broker_name)
        result = core.consumer.receive(request)
        if core is not self._broker_groups.home:
            for delivery in result.messages:
                delivery.receipt_handle = self._broker_groups.outer_handle(core.name, delivery.receipt_handle)
        return result

    def undelivered(self, group: str, handles: list[str]) -> None:
        for core, inner in self._split(handles):
            core.consumer.undelivered(group, inner)

    def _split(self, handles: list[str]) -> list[tuple[BrokerGroupCore, list[str]]]:
        by_core: dict[str, tuple[BrokerGroupCore, list[str]]] = {}
        for handle in handles:
            try:
                core, inner = self._broker_groups.inner_handle(handle)
            except BrokerError:
                continue
            by_core.setdefault(core.name, (core, []))[1].append(inner)
        return list(by_core.values())

    def ack(self, group: str, topic: str, handles: list[str]) -> list[tuple[Code, str]]:
        """One (code, message) per handle, in order."""
        home = self._broker_groups.home
        if all("/" not in handle for handle in handles):
            return home.consumer.ack(group, topic, handles)
        results: list[tuple[Code, str] | None] = [None] * len(handles)
        by_core: dict[str, tuple[BrokerGroupCore, list[int], list[str]]] = {}
        for i, handle in enumerate(handles):
            try:
                core, inner = self._handle_core(topic, handle)
            except BrokerError as exc:
                results[i] = (exc.code, exc.message)
                continue
            entry = by_core.setdefault(core.name, (core, [], []))
            entry[1].append(i)
            entry[2].append(inner)
        for core, positions, inner_handles in by_core.values():
            try:
                outcomes = core.consumer.ack(group, topic, inner_handles)
            except FAILURES as caught:
                error = as_broker_error(caught)
                outcomes = [(error.code, error.message)] * len(positions)
            for i, outcome in zip(positions, outcomes):
                results[i] = outcome
        return [r for r in results if r is not None]

    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int, suspend: bool = False
    ) -> str:
        core, inner = self._handle_core(topic, handle)
        new_handle = core.consumer.change_invisible_duration(group, topic, inner, invisible_ms, suspend)
        return self._broker_groups.outer_handle(core.name, new_handle)

    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: str) -> None:
        core, inner = self._handle_core(topic, handle)
        core.consumer.forward_to_dead_letter_queue(group, topic, inner)

    def query_assignment(self, group: str, topic_name: str) -> Route:
        home = self._broker_groups.home
        if not self._broker_groups.has_route(topic_name):
            return home.consumer.query_assignment(group, topic_name)
        route = self._broker_groups.route(topic_name)
        queues: list[RouteQueue] = []
        first: Route | None = None
        error: BrokerError | None = None
        for name in route.groups:
            queue_data = route.group(name)
            if queue_data is None or not queue_data.readable or queue_data.read_queue_nums <= 0:
                continue
            core = self._broker_groups.core(name)
            if not core.up:
                continue
            try:
                assigned = core.consumer.query_assignment(group, topic_name)
            except FAILURES as caught:
                error = error or as_broker_error(caught)
                log.info("assignment of %s in group %s left out: %s", topic_name, name, error.message)
                continue
            first = first or assigned
            queues.extend(replace(q, broker_name=name) for q in assigned.queues)
        if first is None:
            if error is not None:
                raise error
            raise BrokerError(f"no broker group of topic {topic_name} is readable and up", Code.FORBIDDEN)
        return replace(first, broker_name=home.name, queues=tuple(queues))


class RoutedOffsets:
    """``OffsetService`` of the group named in each request (none: the home group)."""

    def __init__(self, broker_groups: BrokerGroups) -> None:
        self._broker_groups = broker_groups

    def _core(self, topic: str, broker_name: str) -> BrokerGroupCore:
        if broker_name and broker_name != self._broker_groups.home.name:
            self._broker_groups.route(topic)
        return self._broker_groups.core(broker_name)

    def raw_pull(self, request: RawPullRequest) -> Iterator[RawPullResult]:
        """PullRecords (services/broker/raw_pull.py) on the group named in the request."""
        core = self._core(request.topic, request.broker_name)
        return RawPullService(core.offsets, core.store).pull(request)

    def close(self) -> None:
        self._broker_groups.close_services()

    def query_offset(
        self, topic: str, queue_id: int, policy: OffsetPolicy, timestamp_ms: int | None = None, broker_name: str = ""
    ) -> int:
        return self._core(topic, broker_name).offsets.query_offset(topic, queue_id, policy, timestamp_ms, broker_name)

    def update_offset(self, group: str, topic: str, queue_id: int, offset: int, broker_name: str = "") -> None:
        self._core(topic, broker_name).offsets.update_offset(group, topic, queue_id, offset, broker_name)

    def get_offset(self, group: str, topic: str, queue_id: int, broker_name: str = "") -> int:
        return self._core(topic, broker_name).offsets.get_offset(group, topic, queue_id, broker_name)

    def pull(self, request: PullRequest) -> PullResult:
        return self._core(request.topic, request.broker_name).offsets.pull(request)
