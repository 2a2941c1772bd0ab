"""Lite consumers' receives and subscriptions over the broker groups (issue 18). No gRPC here.

A ReceiveMessage on a LITE parent topic is a lite consumer's (LitePushConsumer or
LiteSimpleConsumer of the official clients; they name the parent, their bind topic): it pops
the client's ready lite topics (``lite_subscriptions.py``) with the store's PopLiteMessages, in
every broker group, whatever queue the request names (the clients send the route's first
queue). Each lite topic is consumed in order with one batch in flight, as RocketMQ consumes an
LMQ; a batch takes at most ``batch_size`` messages, from as many lite topics as it needs, and
the lite topics take turns (a lite topic that gave messages goes to the back once announced
again). Nothing ready: the receive waits for its client's wake-up (an arrival in one of its
lite topics, a new subscription) until the polling time is used up.

Acks, changes of invisible time and DLQ forwards need nothing of their own: the store accepts a
lite message's handle with its parent topic (the lite topic the request carries is implied by the
handle). Push consumers' messages are renewed like any push consumer's.

SyncLiteSubscription: the topic must exist and be of type LITE (else TOPIC_NOT_FOUND / ILLEGAL_TOPIC, as
RocketMQ answers a topic that is not the group's lite.bind.topic);
each lite topic is checked as on send (ILLEGAL_LITE_TOPIC); then ``LiteSubscriptions.sync``.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from services.broker import validation
from services.broker.broker_groups import BrokerGroups
from services.broker.consumer import (
    ALIVE_CHECK_S,
    DEFAULT_LIMITS,
    ConsumerLimits,
    ReceiveRequest,
    ReceiveResult,
    batch_size,
    polling_ms,
    receive_invisible_ms,
    validate_group,
)
from services.broker.errors import FAILURES, Code, RequestError
from services.broker.lite_subscriptions import LiteAction, LiteClient, LiteSubscriptions, ReadyKey
from services.domain.group_attributes import lite_bind_topic, lite_client_quota, lite_exclusive, lite_wildcard
from services.domain.lite import lmq_name
from services.runtime.clock import Clock
from services.store.client.model import Delivery

log = logging.getLogger(__name__)

LITE_TYPE = "LITE"
LITE_POP_TOPICS_MAX = 512  # ready lite topics offered to one PopLiteMessages


class OffsetKind(enum.Enum):
    LAST = "LAST"  # keep the group's offset (a new lite topic starts as any new queue)
    MIN = "MIN"
    MAX = "MAX"
    OFFSET = "OFFSET"
    TAIL_N = "TAIL_N"  # the group's offset moved back this many messages (when it has one)
    TIMESTAMP = "TIMESTAMP"  # ignored, as RocketMQ ignores it ("disabled for now")


@dataclass(frozen=True, slots=True)
class OffsetOption:
    """Where a PARTIAL_ADD starts the group in each of its lite topics (``OffsetOption``)."""

    kind: OffsetKind
    value: int = 0

    def __post_init__(self) -> None:
        if self.value < 0:
            raise RequestError(f"offset option {self.kind.value} must not be negative: {self.value}", Code.BAD_REQUEST)


class LiteConsumer:
    def __init__(
        self,
        broker_groups: BrokerGroups,
        subscriptions: LiteSubscriptions,
        clock: Clock,
        limits: ConsumerLimits = DEFAULT_LIMITS,
        notify_unsubscribe: Callable[[str, str], bool] = lambda client_id, lite_topic: False,
    ) -> None:
        """``notify_unsubscribe(client id, lite topic)``: write NotifyUnsubscribeLiteCommand on the
        client's Telemetry stream (False: it has none here)."""
        self._broker_groups = broker_groups
        self._notify_unsubscribe = notify_unsubscribe
        self.subscriptions = subscriptions
        self._clock = clock
        self._limits = limits
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        for client in self.subscriptions.clients():
            client.wake.set()

    def is_lite_topic(self, topic: str) -> bool:
        return self._broker_groups.route(topic).message_type == LITE_TYPE

    def broker_groups_of(self, topic: str) -> list[str]:
        return self._broker_groups.route(topic).groups

    # -- SyncLiteSubscription ----------------------------------------------------------------
    def sync(
        self,
        client_id: str,
        group: str,
        topic: str,
        action: int,
        lite_topics: Iterable[str],
        language: str = "",
        offset_option: OffsetOption | None = None,
    ) -> None:
        if not client_id:
            raise RequestError("x-mq-client-id header is required", Code.CLIENT_ID_REQUIRED)
        validate_group(group)
        try:
            lite_action = LiteAction(action)
        except ValueError:
            raise RequestError(f"unknown lite subscription action {action}", Code.BAD_REQUEST) from None
        if not self.is_lite_topic(topic):
            raise RequestError(
                f"topic {topic} is not a LITE topic: lite consumers bind LITE topics", Code.ILLEGAL_TOPIC
            )
        names = list(lite_topics)
        if lite_action is LiteAction.PARTIAL_ADD and language.upper() == "PYTHON" and len(names) > 1:
            names = python_partial_add(names)
        for name in names:
            validation.validate_lite_topic(name)
        info = self._broker_groups.home.store.get_group(group)
        attributes = info.attributes if info is not None else {}
        bound = lite_bind_topic(attributes)
        if bound and bound != topic:
            raise RequestError(
                f"lite group {group} is expected to bind topic {bound}, but actual is {topic}", Code.ILLEGAL_TOPIC
            )
        quota = lite_client_quota(attributes, self.subscriptions.quota)
        wildcard = lite_wildcard(attributes)
        before = self.subscriptions.client(client_id)
        was_wildcard = before is not None and before.wildcard and (before.group, before.topic) == (group, topic)
        if lite_action is LiteAction.PARTIAL_ADD and offset_option is not None and not wildcard:
            # before the subscription makes the lite topics ready: a receive already waiting
            # (a push consumer's always is) must pop from the new offset
            for name in names:
                self._reset_offset(group, topic, name, offset_option)
        evicted = self.subscriptions.sync(
            client_id,
            group,
            topic,
            lite_action,
            names,
            quota=quota,
            exclusive=lite_exclusive(attributes),
            wildcard=wildcard,
        )
        client = self.subscriptions.client(client_id)
        if wildcard and not was_wildcard and client is not None and client.wildcard:
            self._mark_backlog(client, self.broker_groups_of(topic))  # a full dispatch, as RocketMQ's onRegister
        for holder, lite_topic in evicted:
            self._notify_unsubscribe(holder, lite_topic)

    def _mark_backlog(self, client: LiteClient, broker_groups: Iterable[str]) -> None:
        """Mark every lite topic of the client's parent where its group has messages to read."""
        for broker_group in broker_groups:
            core = self._broker_groups.known(broker_group)
            after = ""
            while core is not None:
                rows, after = core.store.list_lite_topics(client.topic, client.group, backlog_only=True, after=after)
                self.subscriptions.mark(client, broker_group, [lmq_name(client.topic, r.lite_topic) for r in rows])
                if not after:
                    break

    def wildcard_restart(self, broker_group: str, clients: list[LiteClient]) -> None:
        """A broker group's arrivals may have been missed: its backlog for the wildcard clients
        (on a thread of its own: the arrival watch goes on meanwhile)."""

        def run() -> None:
            for client in clients:
                try:
                    self._mark_backlog(client, [broker_group])
                except FAILURES as exc:
                    log.warning("listing the lite backlog of %s in %s failed: %s", client.group, broker_group, exc)

        threading.Thread(target=run, name="lite-wildcard-backlog", daemon=True).start()

    def _reset_offset(self, group: str, topic: str, lite_topic: str, option: OffsetOption) -> None:
        """Move the group's offset in the lite topic, in every broker group of the parent (the
        offset is the group's, not the client's), as RocketMQ's resetOffset on a PARTIAL_ADD."""
        lmq = lmq_name(topic, lite_topic)
        for broker_group in self.broker_groups_of(topic):
            store = self._broker_groups.core(broker_group).store
            current = store.query_consumer_offset(group, lmq, 0)
            if option.kind is OffsetKind.MIN:
                target = 0
            elif option.kind is OffsetKind.MAX:
                target = store.queue_offsets(lmq, 0)[1]
            elif option.kind is OffsetKind.OFFSET:
                target = option.value
            elif option.kind is OffsetKind.TAIL_N and current >= 0:
                target = max(0, current - option.value)
            else:  # LAST, a TAIL_N without an offset yet, TIMESTAMP (ignored by RocketMQ too)
                continue
            if target != current:
                store.commit_consumer_offset(group, lmq, 0, target)  # (drops the group's batch in flight)
                self.subscriptions.on_arrivals(broker_group, [lmq])  # its subscribers pop from there

    # -- ReceiveMessage ----------------------------------------------------------------------
    def receive(self, request: ReceiveRequest) -> ReceiveResult:
        invisible = receive_invisible_ms(request.invisible_ms, request.auto_renew, self._limits)
        poll_ms = polling_ms(request.long_polling_ms, request.deadline_remaining_ms, self._limits)
        count = batch_size(request.batch_size, self._limits)
        deadline = self._clock.monotonic_s() + poll_ms / 1000
        while not self._closed.is_set():
            client = self.subscriptions.client(request.client_id)
            if client is None or (client.group, client.topic) != (request.group, request.topic):
                # not subscribed (yet): nothing to pop; look again now and then
                if not self._wait(None, deadline, request):
                    return ReceiveResult()
                continue
            client.wake.clear()  # before popping: a wake-up after this is not lost
            found = self._pop(client, count, invisible, request)
            if found:
                return ReceiveResult(found)
            if not self._wait(client.wake, deadline, request):
                return ReceiveResult()
        return ReceiveResult()

    def _pop(self, client: LiteClient, count: int, invisible_ms: int, request: ReceiveRequest) -> list[Delivery]:
        taken = self.subscriptions.take(client, LITE_POP_TOPICS_MAX)
        by_broker_group: dict[str, list[tuple[ReadyKey, int]]] = {}
        for key, mark in taken:
            by_broker_group.setdefault(key[0], []).append((key, mark))
        found: list[Delivery] = []
        for broker_group, keys in by_broker_group.items():
            if len(found) >= count:
                break
            core = self._broker_groups.known(broker_group)
            if core is None:
                self.subscriptions.examined(client, keys)  # a group this broker no longer serves
                continue
            popped_at_ms = self._clock.now_ms()
            outcome = core.store.pop_lite_messages(
                client.group, [key[1] for key, _ in keys], count - len(found), count, invisible_ms
            )
            self.subscriptions.examined(
                client, [(key, mark) for key, mark in keys if key[1] in outcome.examined_topics]
            )
            delivered = core.consumer.delivered(request, outcome.messages, invisible_ms, popped_at_ms).messages
            for delivery in delivered:
                delivery.receipt_handle = self._broker_groups.outer_handle(core.name, delivery.receipt_handle)
            found.extend(delivered)
        return found

    def _wait(self, wake: threading.Event | None, deadline: float, request: ReceiveRequest) -> bool:
        """Wait for ``wake`` (None: just a while) or the deadline; False once the deadline passed,
        the caller left or the service closed."""
        while wake is None or not wake.is_set():
            remaining_s = deadline - self._clock.monotonic_s()
            if remaining_s <= 0 or self._closed.is_set() or not request.alive():
                return False
            step = min(remaining_s, ALIVE_CHECK_S)
            if wake is None:
                self._closed.wait(step)
                return self._clock.monotonic_s() < deadline and request.alive()
            wake.wait(step)
        return not self._closed.is_set()


def python_partial_add(names: list[str]) -> list[str]:
    """The official Python client (5.1.2) subscribes one lite topic with ``lite_topic_set.extend(name)``,
    which sends the name's characters one by one (docs/v2-clients.md, pitfall 21); it never adds
    several at once. All one-character entries: the one name they spell, in order."""
    return ["".join(names)] if all(len(name) == 1 for name in names) else names
