"""ConsumerService: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue and QueryAssignment. No gRPC here.

The broker keeps no durable consumption state (only, in memory, which push-consumer messages
it renews: ``renewal.py``): every pop, ack and change of invisible time is one store call
(``PopStore``; the store's PopService keeps offsets, in-flight handles, revives into
``%RETRY%<group>_<topic>`` and moves to ``%DLQ%<group>`` after ``retry_max_times + 1``
deliveries).

Receive
-------
validate group / topic (ILLEGAL_CONSUMER_GROUP, ILLEGAL_TOPIC, TOPIC_NOT_FOUND) -> invisible
time -> filter (a bad one fails before any wait) -> polling time, then loop until the polling
time is used up:

* ``park`` on the ``ArrivalHub`` for the topic and the group's retry topic *before* popping
  (an arrival between the pop and the wait is not lost);
* pop with queue id -1 (every read queue plus the retry topic, as the proxy does; the
  request's queue id is ignored, FIFO too). FIFO: the client's ``subscription.fifo`` comes
  from our settings reply, i.e. from the group's ``consume_message_orderly``, and the store's
  PopService ORs that same group setting into the pop's ``fifo`` flag itself, so the broker
  saves a GetGroup per receive and passes ``ReceiveRequest.fifo`` (False from v2 requests);
* messages whose real TAGS do not match the expression (a tags-code collision) are acked and
  dropped; if nothing is left, wait for an arrival (or the rest of the polling time) and pop
  again. (SQL92 filtering is exact in the store: nothing to drop here.)

Invisible time: ``invisible_ms`` in [10 s, 12 h], else ILLEGAL_INVISIBLE_TIME. ``auto_renew``
without an invisible duration (push consumers): ``ConsumerLimits.auto_renew_invisible_ms`` (60 s).

Push consumers (a receive with ``auto_renew``, or from a client whose Settings said
PUSH_CONSUMER): each delivered message is tracked by the ``renewal.ReceiptRenewer``, which keeps
extending its invisible time until it is settled. The client settles it with the handle it was
given, which the store no longer knows once renewed: ack, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue swap in the current handle (``ReceiptHandleTable.hold``) and stop
the renewal when the store has answered (``release``). Without a renewer (tests, or
``auto_renew_enable`` off) nothing is tracked: the message comes back after its invisible time.

Polling time: the request's long polling timeout (or the remaining deadline), clamped to
[5 s, 20 s] and to the remaining gRPC deadline minus ``DEADLINE_MARGIN_MS``; a deadline
less than 5 s away is ILLEGAL_POLLING_TIME.

Topics: an unknown topic is auto-created like on send when auto-create is on (the proxy
answers TOPIC_NOT_FOUND); clients query its route first anyway.

Filters (``parse_filter``): TAG ``*`` (or empty) accepts everything, ``a || b`` the listed tags
(tags codes are Java ``String.hashCode``, as in the ConsumeQueue). SQL92 (``a > 5 AND color =
'red'``, RocketMQ's grammar over the message properties, ``TAGS`` included): compiled here with
``services.domain.sql_filter.compile_sql`` only to validate it (a bad expression is
ILLEGAL_FILTER_EXPRESSION, naming the position), then passed as text to the store's pop, which
evaluates it on every candidate message, retry copies included, and finishes the messages that do
not match as if acked: they are never delivered to this group, not even later. Only a TRUE result
matches; a comparison with an absent property (or one that does not parse as the literal's number)
is UNKNOWN, and so is its NOT.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from services.broker import validation
from services.broker.config import address_scheme
from services.broker.errors import FAILURES, BrokerError, Code, ForbiddenError, RequestError, as_broker_error
from services.broker.renewal import ReceiptRenewer, TrackedHandle, current_handles, settled
from services.broker.route import MASTER_BROKER_ID, Route, RouteQueue
from services.domain.format.java_compat import java_string_hash_repeated
from services.domain.format.properties_format import (
    KEY_SEPARATOR,
    KEYS,
    TAGS,
    UNIQ_KEY,
)
from services.domain.names import is_system_group, pop_retry_topic, retry_topic, validate_group_name
from services.domain.sql_filter import SqlFilterError, compile_sql
from services.runtime.clock import Clock
from services.store.client.model import AckResult, Delivery, GroupInfo, PopOutcome, TopicInfo

# The invisible durations a client may ask for (the proxy's bounds; the store's own limit is wider).
CLIENT_INVISIBLE_MS_MIN = 10_000
CLIENT_INVISIBLE_MS_MAX = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000
POLLING_MS_MIN = 5_000
POLLING_MS_MAX = 20_000
DEADLINE_MARGIN_MS = 100
BATCH_DEFAULT = 32
BATCH_MAX = 32
ALIVE_CHECK_S = 1.0  # a parked receive checks this often whether its caller is still there
POP_ROUNDS_MAX = 1000  # pops per receive (each round either returns or waits)


# Properties never handed to consumers as user properties: the proxy's reserved set, the keys
# the broker writes, and the classic bookkeeping keys.
class FilterType(enum.Enum):
    TAG = "TAG"
    SQL = "SQL"


class PopStore(Protocol):
    """The store's pop RPCs. Failures to reach the store raise StoreCallError."""

    def pop_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        tags_codes: Iterable[int],
        fifo: bool,
        sql_expression: str = "",
    ) -> PopOutcome:
        """``sql_expression``: a SQL92 filter already validated by ``compile_sql``, or "" for none."""

    def ack_messages(self, group: str, topic: str, handles: list[str]) -> list[AckResult]: ...
    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int, suspend: bool = False
    ) -> tuple[AckResult, str]: ...
    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: str) -> AckResult: ...
    def get_group(self, name: str) -> GroupInfo | None: ...


class TopicSource(Protocol):
    def get(self, name: str) -> TopicInfo: ...


# -- long polling ---------------------------------------------------------------------------------


class Parked:
    """One waiting receiver: set by ``ArrivalHub.notify`` for any of its topics; ``on_wake``
    (a waiter with no thread of its own: the remoting door's held pulls) is called then too, on
    the notifier's thread, and must not block."""

    __slots__ = ("topics", "event", "on_wake")

    def __init__(self, topics: frozenset[str], on_wake: Callable[[], None] | None = None) -> None:
        self.topics = topics
        self.event = threading.Event()
        self.on_wake = on_wake

    def wake(self) -> None:
        self.event.set()
        if self.on_wake is not None:
            self.on_wake()


class ArrivalHub:
    """Fans the broker's one WatchArrivals stream out to parked receivers.

    ``notify(topics)`` is called by the watch thread; receivers ``park`` before popping and
    ``unpark`` when done. ``notify_all`` wakes everyone (the watch stream restarted: arrivals
    may have been missed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_topic: dict[str, set[Parked]] = {}

    def park(self, topics: Iterable[str], on_wake: Callable[[], None] | None = None) -> Parked:
        parked = Parked(frozenset(topics), on_wake)
        with self._lock:
            for topic in parked.topics:
                self._by_topic.setdefault(topic, set()).add(parked)
        return parked

    def unpark(self, parked: Parked) -> None:
        with self._lock:
            for topic in parked.topics:
                waiting = self._by_topic.get(topic)
                if waiting is not None:
                    waiting.discard(parked)
                    if not waiting:
                        del self._by_topic[topic]

    def notify(self, topics: Iterable[str]) -> None:
        with self._lock:
            woken = [p for t in set(topics) for p in self._by_topic.get(t, ())]
        for parked in woken:
            parked.wake()

    def notify_all(self) -> None:
        with self._lock:
            woken = [p for waiting in self._by_topic.values() for p in waiting]
        for parked in woken:
            parked.wake()

    def parked_count(self) -> int:
        with self._lock:
            return len({p for waiting in self._by_topic.values() for p in waiting})


# -- requests ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ReceiveRequest:
    group: str
    topic: str
    filter_type: FilterType = FilterType.TAG
    filter_expression: str = "*"
    batch_size: int = 0
    invisible_ms: int | None = None  # None: field absent
    auto_renew: bool = False
    long_polling_ms: int | None = None  # None: field absent
    deadline_remaining_ms: int | None = None  # None: no gRPC deadline
    fifo: bool = False  # the client's subscription says FIFO
    client_id: str = ""  # x-mq-client-id: whose in-flight messages these become
    alive: Callable[[], bool] = lambda: True  # False once the caller cancelled the call
    broker_name: str = ""  # message_queue.broker.name: the broker group to receive from ("": the home group)


@dataclass(slots=True)
class ReceiveResult:
    messages: list[Delivery] = field(default_factory=list)


def validate_group(name: str) -> None:
    reason = validate_group_name(name)
    if reason:
        raise RequestError(reason, Code.ILLEGAL_CONSUMER_GROUP)
    if is_system_group(name):
        raise RequestError(f"cannot use system group: {name}", Code.ILLEGAL_CONSUMER_GROUP)


@dataclass(frozen=True, slots=True)
class Filter:
    tags: frozenset[str] | None = None  # TAG: the accepted tags; None: every message
    sql_expression: str = ""  # SQL92: evaluated by the store's pop; "": none


def parse_filter(filter_type: FilterType, expression: str) -> Filter:
    if filter_type is FilterType.SQL:
        try:
            compile_sql(expression)
        except SqlFilterError as exc:
            raise RequestError(f"illegal SQL92 filter expression: {exc}", Code.ILLEGAL_FILTER_EXPRESSION) from None
        return Filter(sql_expression=expression)
    return Filter(tags=parse_tag_filter(expression))


def parse_tag_filter(expression: str) -> frozenset[str] | None:
    """The accepted tags, or None for "every message"."""
    text = expression.strip()
    if not text or text == "*":
        return None
    tags = frozenset(t.strip() for t in text.split("||")) - {""}
    if not tags:
        raise RequestError(f"illegal tag expression {expression!r}", Code.ILLEGAL_FILTER_EXPRESSION)
    if "*" in tags:
        return None
    return tags


def tags_codes(tags: frozenset[str] | None) -> list[int]:
    return [] if tags is None else sorted(java_string_hash_repeated(t) for t in tags)


@dataclass(frozen=True)
class ConsumerLimits:
    """The bounds a receive is held to (BrokerConfig: invisible_duration_ms_min/max,
    long_polling_timeout_ms_min/max, consumer_receive_batch_size)."""

    invisible_ms_min: int = CLIENT_INVISIBLE_MS_MIN
    invisible_ms_max: int = CLIENT_INVISIBLE_MS_MAX
    polling_ms_min: int = POLLING_MS_MIN
    polling_ms_max: int = POLLING_MS_MAX
    batch_max: int = BATCH_MAX
    auto_renew_invisible_ms: int = AUTO_RENEW_INVISIBLE_MS  # auto_renew without invisible_duration


DEFAULT_LIMITS = ConsumerLimits()


def polling_ms(
    long_polling_ms: int | None, deadline_remaining_ms: int | None, limits: ConsumerLimits = DEFAULT_LIMITS
) -> int:
    low, high = limits.polling_ms_min, limits.polling_ms_max
    if deadline_remaining_ms is not None and deadline_remaining_ms < low:
        raise RequestError(
            f"the request deadline ({deadline_remaining_ms} ms) is shorter than the minimum polling time {low} ms",
            Code.ILLEGAL_POLLING_TIME,
        )
    wanted = (
        long_polling_ms
        if long_polling_ms is not None
        else (deadline_remaining_ms if deadline_remaining_ms is not None else high)
    )
    wanted = min(max(wanted, low), high)
    if deadline_remaining_ms is not None:
        wanted = min(wanted, deadline_remaining_ms - DEADLINE_MARGIN_MS)
    return max(0, wanted)


def receive_invisible_ms(invisible_ms: int | None, auto_renew: bool, limits: ConsumerLimits = DEFAULT_LIMITS) -> int:
    if invisible_ms is None:
        if auto_renew:
            return limits.auto_renew_invisible_ms
        raise RequestError("invisible_duration is required", Code.ILLEGAL_INVISIBLE_TIME)
    low, high = limits.invisible_ms_min, limits.invisible_ms_max
    if not low <= invisible_ms <= high:
        raise RequestError(
            f"invisible_duration must be in [{low}, {high}] ms, not {invisible_ms}", Code.ILLEGAL_INVISIBLE_TIME
        )
    return invisible_ms


def batch_size(requested: int, limits: ConsumerLimits = DEFAULT_LIMITS) -> int:
    return min(BATCH_DEFAULT, limits.batch_max) if requested <= 0 else min(requested, limits.batch_max)


def message_id(delivery: Delivery) -> str:
    return delivery.properties.get(UNIQ_KEY) or delivery.offset_msg_id


def keys_of(properties: dict[str, str]) -> list[str]:
    return [k for k in properties.get(KEYS, "").split(KEY_SEPARATOR) if k]


# -- the service ---------------------------------------------------------------------------------


class ConsumerService:
    def __init__(
        self,
        store: PopStore,
        topics: TopicSource,
        hub: ArrivalHub,
        clock: Clock,
        broker_name: str,
        endpoint: tuple[str, int],
        limits: ConsumerLimits = DEFAULT_LIMITS,
        renewer: ReceiptRenewer | None = None,
    ) -> None:
        self._store = store
        self._renewer = renewer
        self._limits = limits
        self._topics = topics
        self._hub = hub
        self._clock = clock
        self._broker_name = broker_name
        self._endpoint = endpoint
        self._closed = False

    def close(self) -> None:
        """Release parked receivers (they answer MESSAGE_NOT_FOUND); no more pops."""
        self._closed = True
        self._hub.notify_all()

    def _check(self, group: str, topic: str) -> TopicInfo:
        validate_group(group)
        validation.validate_topic(topic)
        return self._topics.get(topic)

    def receive(self, request: ReceiveRequest) -> ReceiveResult:
        self._check(request.group, request.topic)
        invisible = receive_invisible_ms(request.invisible_ms, request.auto_renew, self._limits)
        message_filter = parse_filter(request.filter_type, request.filter_expression)
        tags, sql = message_filter.tags, message_filter.sql_expression
        codes = tags_codes(tags)
        poll_ms = polling_ms(request.long_polling_ms, request.deadline_remaining_ms, self._limits)
        count = batch_size(request.batch_size, self._limits)
        deadline = self._clock.monotonic_s() + poll_ms / 1000
        # The legacy shared retry topic too: a store from before issue 15 may still hold retries there.
        watched = (request.topic, pop_retry_topic(request.group, request.topic), retry_topic(request.group))
        for _ in range(POP_ROUNDS_MAX):
            if self._closed:
                return ReceiveResult()
            parked = self._hub.park(watched)
            try:
                popped_at_ms = self._clock.now_ms()
                outcome = self._store.pop_messages(
                    request.group, request.topic, -1, count, invisible, codes, request.fifo, sql_expression=sql
                )
                found = self._drop_mismatched(request, tags, outcome.messages)
                if found:
                    return self.delivered(request, found, invisible, popped_at_ms)
                remaining_s = deadline - self._clock.monotonic_s()
                if remaining_s <= 0:
                    return ReceiveResult()
                if not self._wait(parked, deadline, request.alive):
                    return ReceiveResult()  # the caller went away: pop nothing more for it
            finally:
                self._hub.unpark(parked)
            if self._clock.monotonic_s() >= deadline and not self._closed:
                # One last look: the wake-up may have come right at the end.
                popped_at_ms = self._clock.now_ms()
                outcome = self._store.pop_messages(
                    request.group, request.topic, -1, count, invisible, codes, request.fifo, sql_expression=sql
                )
                found = self._drop_mismatched(request, tags, outcome.messages)
                return self.delivered(request, found, invisible, popped_at_ms)
        return ReceiveResult()

    def delivered(
        self, request: ReceiveRequest, found: list[Delivery], invisible_ms: int, popped_at_ms: int
    ) -> ReceiveResult:
        """The result; a push consumer's messages are tracked for renewal first."""
        renewer = self._renewer
        if found and renewer is not None and (request.auto_renew or renewer.is_push_consumer(request.client_id)):
            for delivery in found:
                renewer.track(
                    request.client_id,
                    request.group,
                    request.topic,
                    message_id(delivery),
                    delivery.receipt_handle,
                    invisible_ms,
                    popped_at_ms,
                    delivery.delivery_attempt,
                )
        return ReceiveResult(found)

    def undelivered(self, group: str, handles: list[str]) -> None:
        """The receive's response did not reach the client: do not renew those messages."""
        if self._renewer is not None and handles:
            self._renewer.untrack(group, handles)

    def _wait(self, parked: Parked, deadline: float, alive: Callable[[], bool]) -> bool:
        """Wait for an arrival or the deadline; False if the caller is gone (checked every
        ``ALIVE_CHECK_S``) or the service closed."""
        while not parked.event.is_set():
            remaining_s = deadline - self._clock.monotonic_s()
            if remaining_s <= 0:
                break
            parked.event.wait(min(remaining_s, ALIVE_CHECK_S))
            if self._closed or not alive():
                return False
        return not self._closed

    def _drop_mismatched(
        self, request: ReceiveRequest, tags: frozenset[str] | None, messages: list[Delivery]
    ) -> list[Delivery]:
        if tags is None:
            return messages
        kept = []
        mismatched: dict[str, list[str]] = {}
        for delivery in messages:
            if delivery.properties.get(TAGS) in tags:
                kept.append(delivery)
            else:  # a tags-code collision: not for this subscription
                mismatched.setdefault(delivery.topic, []).append(delivery.receipt_handle)
        for topic, handles in mismatched.items():
            self._store.ack_messages(request.group, topic, handles)
        return kept

    # -- ack / nack / DLQ ---------------------------------------------------------------------
    def ack(self, group: str, topic: str, handles: list[str]) -> list[tuple[Code, str]]:
        """One (code, message) per handle, in order."""
        self._check(group, topic)
        results: list[tuple[Code, str] | None] = [
            None if handle else (Code.INVALID_RECEIPT_HANDLE, "receipt handle is empty") for handle in handles
        ]
        sent = [i for i, result in enumerate(results) if result is None]
        if sent:  # one store call for the whole request
            given = [handles[i] for i in sent]
            held: list[TrackedHandle | None] = (
                self._renewer.table.hold(group, given) if self._renewer is not None else [None] * len(given)
            )
            done = [False] * len(given)
            try:
                acked = self._store.ack_messages(group, topic, current_handles(held, given))
                outcomes = [_ack_code(r) for r in acked]
                done = [settled(r) for r in acked]
            except FAILURES as caught:
                exc = as_broker_error(caught)
                outcomes = [(exc.code, exc.message)] * len(sent)
            finally:
                if self._renewer is not None:
                    self._renewer.table.release(held, done)
            for i, outcome in zip(sent, outcomes):
                results[i] = outcome
        return [r for r in results if r is not None]

    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int, suspend: bool = False
    ) -> str:
        """The new receipt handle. ``suspend`` (lite consumers): the redelivery is not another attempt."""
        self._check(group, topic)
        if not 0 <= invisible_ms <= self._limits.invisible_ms_max:
            raise RequestError(
                f"invisible_duration must be in [0, {self._limits.invisible_ms_max}] ms, not {invisible_ms}",
                Code.ILLEGAL_INVISIBLE_TIME,
            )
        if not handle:
            raise RequestError("receipt handle is empty", Code.INVALID_RECEIPT_HANDLE)
        # A push consumer's nack (or a renewed handle's change): the client takes over; no more renewal.
        held: list[TrackedHandle | None] = self._renewer.table.hold(group, [handle]) if self._renewer else [None]
        done = [False]
        try:
            result, new_handle = self._store.change_invisible_duration(
                group, topic, current_handles(held, [handle])[0], invisible_ms, suspend
            )
            done = [settled(result)]
        finally:
            if self._renewer is not None:
                self._renewer.table.release(held, done)
        code, message = _ack_code(result)
        if code is not Code.OK:
            raise BrokerError(message, code)
        return new_handle

    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: str) -> None:
        self._check(group, topic)
        if not handle:
            raise RequestError("receipt handle is empty", Code.INVALID_RECEIPT_HANDLE)
        held: list[TrackedHandle | None] = self._renewer.table.hold(group, [handle]) if self._renewer else [None]
        done = [False]
        try:
            result = self._store.forward_to_dead_letter_queue(group, topic, current_handles(held, [handle])[0])
            done = [settled(result)]
        finally:
            if self._renewer is not None:
                self._renewer.table.release(held, done)
        code, message = _ack_code(result)
        if code is not Code.OK:
            raise BrokerError(message, code)

    # -- assignments -------------------------------------------------------------------------
    def query_assignment(self, group: str, topic_name: str) -> Route:
        """Non-FIFO group: one "any queue" (-1) assignment for this broker; FIFO: one per read queue."""
        topic = self._check(group, topic_name)
        if not topic.readable or topic.read_queue_nums <= 0:
            raise ForbiddenError("no readable queue", Code.FORBIDDEN)
        info = self._store.get_group(group)
        permission = "READ_WRITE" if topic.writable else "READ"
        if info is not None and info.consume_message_orderly and topic.message_type != "LITE":
            # (a lite consumer pops its lite topics, each in order, whatever queue it names)
            queues = tuple(RouteQueue(i, permission) for i in range(topic.read_queue_nums))
        else:
            queues = (RouteQueue(-1, permission),)
        host, port = self._endpoint
        return Route(
            topic=topic.name,
            broker_name=self._broker_name,
            broker_id=MASTER_BROKER_ID,
            endpoint_scheme=address_scheme(host),
            endpoint_host=host,
            endpoint_port=port,
            queues=queues,
            accept_message_types=(),
        )


def _ack_code(result: AckResult) -> tuple[Code, str]:
    if result is AckResult.OK:
        return Code.OK, "OK"
    if result is AckResult.INVALID_RECEIPT_HANDLE:
        return Code.INVALID_RECEIPT_HANDLE, "receipt handle is invalid or expired"
    return Code.INTERNAL_SERVER_ERROR, "could not write the dead-letter copy; retry"
