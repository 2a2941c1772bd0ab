"""Routes, sends, recalls and transaction ends over several broker groups (issue 17).

The RocketMQ 5 proxy in cluster mode, reduced to what a stateless broker needs (broker_groups.py says
where routes come from). Topics without an etcd route take the single-group path unchanged.

* QueryRoute (``RouteService``): route.py says what a route holds.
* SendMessage: the broker chooses the queue, as the proxy does (clients' choices are not
  trusted: services/broker/queue_selection.py): ``select_write_queue`` over all groups' write
  queues (services/domain/routes.py): a FIFO message group keeps its one queue whether its
  group is up or not (the send waits for the group's failover, or fails); any other send goes
  round-robin to a group that is up (a lite message's lite topic keeps its queue the same way), and if its group fails it at once (unreachable, no
  master, too few replicas in sync, topic missing there) it is sent again to the next group
  that is up, while its deadline lasts. A send whose outcome is unknown (timed out) is not
  sent again here: the client's retry decides, as with RocketMQ.
* Classic sends (the remoting door, ``RoutedClassicSends``): the client chose the group (the
  port or ``bname``) and the queue. A send that may move (``movable``: not on a FIFO topic, no
  ``__SHARDINGKEY`` message group, not a transaction's half, whose END_TRANSACTION comes back to
  the group the client sent to) goes instead to a write queue of another group that is up when
  its group is down, or when its group failed it at once, while its deadline lasts; the answer
  names the queue and the offsetMsgId where it was stored. Others stay with their group and get
  its failure.
* RecallMessage: the recall handle names its group (RocketMQ's handle carries brokerName).
* EndTransaction: the half is in the group its send went to. The broker that took the send
  remembers it (each group's HalfMessageTable); any other broker asks each group of the topic
  by the transaction id key until one has the half.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

from services.broker.broker_groups import BrokerGroups
from services.broker.classic_producer import ClassicMessage, ClassicReceipt
from services.broker.config import address_scheme
from services.broker.errors import (
    FAILURES,
    BrokerError,
    Code,
    ForbiddenError,
    RequestError,
    StoreCallError,
    as_broker_error,
)
from services.broker.model import IncomingMessage, SendReceipt
from services.broker.recall import decode_handle
from services.broker.route import MASTER_BROKER_ID, Route, RouteQueue, accepted_types, queue_permission
from services.broker.transaction import Resolution
from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_PREPARED_TYPE
from services.domain.format.properties_format import SHARDING_KEY
from services.domain.routes import TopicRoute, select_write_queue
from services.runtime.clock import Clock

log = logging.getLogger(__name__)

# A send that failed with one of these was not written: it may go to another group at once.
LITE_KEY_PREFIX = "\x00lite:"  # never a message group's name (validation refuses control characters)
SEND_ELSEWHERE_CODES = frozenset({Code.INTERNAL_SERVER_ERROR, Code.HA_NOT_AVAILABLE, Code.TOPIC_NOT_FOUND})


class RouteService:
    def __init__(self, broker_groups: BrokerGroups, endpoint: tuple[str, int]) -> None:
        self._broker_groups = broker_groups
        self._endpoint = endpoint

    def query_route(self, topic_name: str) -> Route:
        """ILLEGAL_TOPIC, TOPIC_NOT_FOUND (auto-create off) or the route over every group."""
        route = self._broker_groups.route(topic_name)
        host, port = self._endpoint
        queues = []
        for queue_data in route.queue_datas:
            up = self._broker_groups.up(queue_data.broker_name)
            for queue_id in range(max(queue_data.read_queue_nums, queue_data.write_queue_nums)):
                queues.append(RouteQueue(queue_id, queue_permission(queue_id, queue_data, up), queue_data.broker_name))
        return Route(
            topic=route.topic,
            broker_name=self._broker_groups.home.name,
            broker_id=MASTER_BROKER_ID,
            endpoint_scheme=address_scheme(host),
            endpoint_host=host,
            endpoint_port=port,
            queues=tuple(queues),
            accept_message_types=accepted_types(route),
        )


class RoutedProducer:
    def __init__(self, broker_groups: BrokerGroups, clock: Clock) -> None:
        self._broker_groups = broker_groups
        self._clock = clock
        self._counter = itertools.count()  # round-robin over the write queues of all groups
        self.sent_elsewhere = 0  # sends that went to another group after their first one failed

    def send(self, messages: list[IncomingMessage], peer_address: str, timeout_s: float) -> list[SendReceipt]:
        home = self._broker_groups.home
        if not messages or not self._broker_groups.routed(messages[0].topic):
            return home.producer.send(messages, peer_address, timeout_s)
        topic = messages[0].topic
        route = self._broker_groups.route(topic)
        if not route.write_queues():
            raise ForbiddenError(f"topic {topic} is not writable", Code.FORBIDDEN)
        # A lite topic keeps its one queue like a message group: its messages stay in order in one
        # broker group's LMQ (the lite consumer pops every group).
        message_groups = {m.message_group or (LITE_KEY_PREFIX + m.lite_topic if m.lite_topic else "") for m in messages}
        message_group = message_groups.pop() if len(message_groups) == 1 else ""
        deadline_s = self._clock.monotonic_s() + timeout_s
        index = next(self._counter)
        failed: set[str] = set()
        receipts: list[SendReceipt] = []
        while True:
            queue = select_write_queue(
                route, index, message_group, lambda g: g not in failed and self._broker_groups.up(g)
            ) or select_write_queue(route, index, message_group, lambda g: g not in failed)
            if queue is None:  # every group failed this send: the last answer stands
                assert failed
                return receipts
            broker_group, queue_id = queue
            core = self._broker_groups.core(broker_group)
            try:
                receipts = core.producer.send(messages, peer_address, deadline_s - self._clock.monotonic_s(), queue_id)
                retry = all(r.code in SEND_ELSEWHERE_CODES for r in receipts)
                error: BrokerError | None = None
            except FAILURES as caught:
                error = as_broker_error(caught)
                retry = error.code in SEND_ELSEWHERE_CODES
                receipts = [SendReceipt(code=error.code, status_message=error.message)] * len(messages)
            if not retry or message_group or self._clock.monotonic_s() >= deadline_s:
                if retry and message_group and receipts[0].code != Code.TOPIC_NOT_FOUND:
                    # The group is down; a message group (or lite topic) keeps its queue: order.
                    why = f"broker group {broker_group} is unavailable and a message group stays in its queue"
                    if error is not None:
                        raise StoreCallError(f"{why}: {error.message}", error.code) from None
                    return [dataclasses.replace(r, status_message=f"{why}: {r.status_message}") for r in receipts]
                if error is not None:
                    raise error
                return receipts
            failed.add(broker_group)
            self.sent_elsewhere += 1
            log.info(
                "send to %s of group %s failed (%s); trying another group",
                topic,
                broker_group,
                receipts[0].status_message,
            )

    def recall(self, topic_name: str, handle_text: str, peer_address: str, timeout_s: float) -> str:
        core = self._broker_groups.home
        if self._broker_groups.has_route(topic_name):
            self._broker_groups.route(topic_name)
            core = self._broker_groups.core(decode_handle(handle_text).broker_name)
        return core.producer.recall(topic_name, handle_text, peer_address, timeout_s)


def movable(messages: list[ClassicMessage], route: TopicRoute) -> bool:
    """May a classic send go to another group than the one its client chose? Not on a FIFO
    topic or with a message group (``__SHARDINGKEY``): order is per queue; not a transaction's
    half: END_TRANSACTION and the checks come back to the group the client sent to."""
    return route.message_type != "FIFO" and not any(
        SHARDING_KEY in m.properties or m.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED_TYPE
        for m in messages
    )


class RoutedClassicSends:
    """The remoting door's sends over broker groups (the module docstring)."""

    def __init__(self, broker_groups: BrokerGroups, clock: Clock) -> None:
        self._broker_groups = broker_groups
        self._clock = clock
        self._counter = itertools.count()  # round-robin over the other groups' write queues
        self.sent_elsewhere = 0  # sends stored in another group than the one their client chose

    def send(
        self, broker_name: str, messages: list[ClassicMessage], peer_address: str, timeout_s: float
    ) -> tuple[str, list[ClassicReceipt]]:
        """(the group that stored them, one receipt per message). Raises what the chosen
        group's ClassicProducer raises for a send that stays there."""
        groups = self._broker_groups
        core = groups.core(broker_name)
        if not messages or not groups.has_route(messages[0].topic):
            return core.name, core.classic_producer.send(messages, peer_address, timeout_s)
        route = groups.route(messages[0].topic)
        if not movable(messages, route):
            return core.name, core.classic_producer.send(messages, peer_address, timeout_s)
        deadline_s = self._clock.monotonic_s() + timeout_s
        failed: set[str] = set()
        target: tuple[str, int] | None = (core.name, messages[0].queue_id) if groups.up(core.name) else None
        receipts: list[ClassicReceipt] = []
        while True:
            if target is None:
                target = select_write_queue(
                    route, next(self._counter), "", lambda g: g not in failed and g != core.name and groups.up(g)
                )
                if target is None:  # no other group to go to: the chosen one, whatever its state
                    if core.name in failed:
                        return core.name, receipts
                    target = (core.name, messages[0].queue_id)
            group, queue_id = target
            copies = [dataclasses.replace(m, properties=dict(m.properties), queue_id=queue_id) for m in messages]
            try:
                receipts = groups.core(group).classic_producer.send(
                    copies, peer_address, deadline_s - self._clock.monotonic_s()
                )
                retry = all(r.code in SEND_ELSEWHERE_CODES for r in receipts)
            except FAILURES as caught:
                error = as_broker_error(caught)
                if error.code not in SEND_ELSEWHERE_CODES:
                    raise error from None
                retry = True
                receipts = [ClassicReceipt(error.code, error.message) for _ in messages]
            if not retry or self._clock.monotonic_s() >= deadline_s:
                if group != core.name and all(r.code is Code.OK for r in receipts):
                    self.sent_elsewhere += 1
                return group, receipts
            failed.add(group)
            target = None
            log.info(
                "classic send to %s of group %s failed (%s); trying another group",
                messages[0].topic,
                group,
                receipts[0].message,
            )


class RoutedTransactions:
    def __init__(self, broker_groups: BrokerGroups) -> None:
        self._broker_groups = broker_groups

    def end_transaction(self, topic: str, transaction_id: str, resolution: Resolution, timeout_s: float) -> None:
        home = self._broker_groups.home
        if not self._broker_groups.has_route(topic):
            home.transactions.end_transaction(topic, transaction_id, resolution, timeout_s)
            return
        route = self._broker_groups.route(topic)
        cores = [self._broker_groups.core(name) for name in route.groups]
        remembered = [core for core in cores if core.halves.get(transaction_id) is not None]
        unreachable: BrokerError | None = None
        not_found: BrokerError | None = None
        for core in remembered + [core for core in cores if core not in remembered]:
            try:
                core.transactions.end_transaction(topic, transaction_id, resolution, timeout_s)
                return
            except FAILURES as caught:
                error = as_broker_error(caught)
                if error.code is not Code.INVALID_TRANSACTION_ID:
                    if isinstance(error, RequestError):
                        raise error from None
                    unreachable = unreachable or error
                else:
                    not_found = error
        # A group that could not be asked may hold the half: the client (or the check) tries again.
        failed = unreachable or not_found
        assert failed is not None
        raise failed
