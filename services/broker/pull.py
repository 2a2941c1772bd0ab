"""OffsetService: the v2 offset-based RPCs, QueryOffset, PullMessage, UpdateOffset and GetOffset.
No gRPC here.

The official RocketMQ 5 clients never call these (the proxy does not implement them), so their
semantics are ours, chosen to serve pull clients such as the Spark connector (``pipeline/``)
the way Kafka's fetch API serves Kafka's:

QueryOffset(queue, policy[, timestamp])
    BEGINNING: the queue's min offset; END: its max offset, **exclusive** (the next offset to
    be written, RocketMQ's ConsumeQueue maxOffset); TIMESTAMP: the first offset stored at or
    after the timestamp (END if none is). A queue that never held a message answers 0.

PullMessage(group, queue, offset, batch_size, filter, long_polling_timeout)
    A stream: one ``status``, then up to ``batch_size`` (<= 0: 32; at most 1024) ``message``s
    in queue order, then ``next_offset``, where the caller continues (it may skip past
    messages a TAG filter rejected, so ``next_offset`` can exceed the last message's offset +
    1). Outcomes:

    * OK with messages;
    * MESSAGE_NOT_FOUND, next_offset = offset (or past filtered ones): the caller is caught
      up; with a long polling timeout the call first waits (up to it, and never past the
      deadline) for an arrival in the queue's topic;
    * ILLEGAL_OFFSET, next_offset = min offset: ``offset`` is below the queue's min offset
      (retention removed it: the caller decides whether that is data loss); next_offset = max
      offset when ``offset`` is beyond the end.

    The group is only validated (a pull consumer's position is its own; UpdateOffset records
    it). Filters (``consumer.parse_filter``; a bad one is ILLEGAL_FILTER_EXPRESSION): TAG (``*``
    or ``a || b``, matched on the tags code like RocketMQ, then on the real tag); SQL92 over the
    message's properties (TAGS included), TRUE only. Filtered-out messages are skipped, so
    ``next_offset`` passes them.

UpdateOffset(group, queue, offset) / GetOffset(group, queue)
    The group's committed offset (consumerOffset.json, the same table pop consumers and the
    admin progress use, so lag dashboards see pull consumers too). GetOffset of a queue the
    group never committed is OFFSET_NOT_FOUND.

Queues: the topic must exist (no auto-create on reads) and the queue id be one of its read
queues; a broker name, when given, must be this broker's.

The read loop (``OffsetService.read``) is shared with ``raw_pull.py`` (pyrmq.pull.v1
PullRecords: the same pulls answered with raw CommitLog records): park on the ArrivalHub
*before* each store read (an arrival between the read and the wait is not lost), map the
store's GetStatus, read on past filtered-out messages (at most ``PULL_ROUNDS_MAX`` store reads),
wait only when caught up.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.broker import validation
from services.broker.consumer import (
    ArrivalHub,
    Filter,
    FilterType,
    Parked,
    TopicSource,
    parse_filter,
    tags_codes,
    validate_group,
)
from services.broker.errors import Code, RequestError
from services.domain.format.properties_format import TAGS
from services.domain.sql_filter import compile_sql
from services.runtime.clock import Clock
from services.store.client.model import Delivery, GetOutcome, GetStatus, StoredMessage

PULL_BATCH_DEFAULT = 32
PULL_BATCH_MAX = 1024
PULL_BYTES_MAX = 4 << 20
POLLING_MS_MAX = 30_000
DEADLINE_MARGIN_MS = 100
ALIVE_CHECK_S = 1.0
PULL_ROUNDS_MAX = 1000  # store reads per pull (each finds filtered-out messages, or waits)


class OffsetPolicy(enum.Enum):
    BEGINNING = "BEGINNING"
    END = "END"
    TIMESTAMP = "TIMESTAMP"


class OffsetStore(Protocol):
    """The store calls behind the offset RPCs (the store client's). Failures raise StoreError."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...
    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def get_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int, tags_codes: list[int]
    ) -> GetOutcome: ...
    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


@dataclass(slots=True)
class PullRequest:
    group: str
    topic: str
    queue_id: int
    offset: int
    broker_name: str = ""
    batch_size: int = 0
    filter_type: FilterType = FilterType.TAG
    filter_expression: str = "*"
    long_polling_ms: int | None = None  # None: do not wait
    deadline_remaining_ms: int | None = None  # None: no gRPC deadline
    alive: Callable[[], bool] = lambda: True


@dataclass(slots=True)
class PullResult:
    code: Code
    message: str
    next_offset: int
    messages: list[Any] = field(default_factory=list)  # what the fetch kept: Deliveries (pull) or raw records (bytes)
    min_offset: int = -1  # the queue's, at the last read (-1: none)
    max_offset: int = -1


Fetch = Callable[[int], GetOutcome]  # queue offset -> one store read, exact filter applied


def pulled_delivery(record: StoredMessage) -> Delivery:
    """A record read by offset as the v2 path delivers it: no receipt handle, delivery attempt
    = reconsume times + 1."""
    return Delivery(
        topic=record.topic,
        body=record.body,
        properties=record.properties,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        delivery_attempt=record.reconsume_times + 1,
        receipt_handle="",
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp_ms,
        store_host=record.store_host,
        offset_msg_id=record.offset_msg_id,
    )


def exact_matcher(message_filter: Filter) -> Callable[[Mapping[str, str]], bool] | None:
    """What a message's properties must satisfy beyond the store's tags-code match (None:
    nothing): the real TAGS (tags codes collide), or the SQL92 condition."""
    if message_filter.sql_expression:
        return compile_sql(message_filter.sql_expression).matches
    tags = message_filter.tags
    if tags is None:
        return None
    return lambda properties: properties.get(TAGS) in tags


class Offsets(Protocol):
    """What the offset RPCs call: an ``OffsetService``, or one per broker group (broker_group_consumer.py)."""

    def query_offset(
        self, topic: str, queue_id: int, policy: OffsetPolicy, timestamp_ms: int | None = None, broker_name: str = ""
    ) -> int: ...
    def update_offset(self, group: str, topic: str, queue_id: int, offset: int, broker_name: str = "") -> None: ...
    def get_offset(self, group: str, topic: str, queue_id: int, broker_name: str = "") -> int: ...
    def pull(self, request: PullRequest) -> PullResult: ...


class OffsetService:
    def __init__(
        self, store: OffsetStore, topics: TopicSource, hub: ArrivalHub, clock: Clock, broker_name: str
    ) -> None:
        self._store = store
        self._topics = topics
        self._hub = hub
        self._clock = clock
        self._broker_name = broker_name
        self._closed = False

    def close(self) -> None:
        """End parked pulls (they answer MESSAGE_NOT_FOUND)."""
        self._closed = True
        self._hub.notify_all()

    def check_queue(self, topic: str, queue_id: int, broker_name: str = "") -> None:
        """ILLEGAL_TOPIC / TOPIC_NOT_FOUND / BAD_REQUEST (queue id, broker name)."""
        validation.validate_topic(topic)
        info = self._topics.get(topic, create=False)  # type: ignore[call-arg]
        if broker_name and broker_name != self._broker_name:
            raise RequestError(
                f"queue {topic}/{queue_id} is on broker {broker_name!r}, this is {self._broker_name!r}",
                Code.BAD_REQUEST,
            )
        if not 0 <= queue_id < info.read_queue_nums:
            raise RequestError(
                f"topic {topic} has read queues 0..{info.read_queue_nums - 1}, not {queue_id}", Code.BAD_REQUEST
            )

    # -- QueryOffset ----------------------------------------------------------------------------
    def query_offset(
        self, topic: str, queue_id: int, policy: OffsetPolicy, timestamp_ms: int | None = None, broker_name: str = ""
    ) -> int:
        self.check_queue(topic, queue_id, broker_name)
        if policy is OffsetPolicy.TIMESTAMP:
            if timestamp_ms is None:
                raise RequestError("QueryOffset with policy TIMESTAMP needs a timestamp", Code.BAD_REQUEST)
            return self._store.offset_by_timestamp(topic, queue_id, timestamp_ms)
        min_offset, max_offset = self._store.queue_offsets(topic, queue_id)
        return min_offset if policy is OffsetPolicy.BEGINNING else max_offset

    # -- UpdateOffset / GetOffset -----------------------------------------------------------------
    def update_offset(self, group: str, topic: str, queue_id: int, offset: int, broker_name: str = "") -> None:
        validate_group(group)
        self.check_queue(topic, queue_id, broker_name)
        if offset < 0:
            raise RequestError(f"offset must not be negative, got {offset}", Code.ILLEGAL_OFFSET)
        self._store.commit_consumer_offset(group, topic, queue_id, offset)

    def get_offset(self, group: str, topic: str, queue_id: int, broker_name: str = "") -> int:
        validate_group(group)
        self.check_queue(topic, queue_id, broker_name)
        offset = self._store.query_consumer_offset(group, topic, queue_id)
        if offset < 0:
            raise RequestError(f"group {group} has no offset for {topic}/{queue_id}", Code.OFFSET_NOT_FOUND)
        return offset

    # -- PullMessage ----------------------------------------------------------------------------
    def pull(self, request: PullRequest) -> PullResult:
        validate_group(request.group)
        self.check_queue(request.topic, request.queue_id, request.broker_name)
        if request.offset < 0:
            raise RequestError(f"offset must not be negative, got {request.offset}", Code.ILLEGAL_OFFSET)
        message_filter = parse_filter(request.filter_type, request.filter_expression)
        codes = tags_codes(message_filter.tags)
        matches = exact_matcher(message_filter)
        count = PULL_BATCH_DEFAULT if request.batch_size <= 0 else min(request.batch_size, PULL_BATCH_MAX)

        def fetch(offset: int) -> GetOutcome:
            got = self._store.get_messages(request.topic, request.queue_id, offset, count, PULL_BYTES_MAX, codes)
            got.messages = [pulled_delivery(m) for m in got.messages if matches is None or matches(m.properties)]
            return got

        wait_ms = self.polling_ms(request.long_polling_ms, request.deadline_remaining_ms)
        return self.read(request.topic, request.offset, wait_ms, request.alive, fetch)

    def read(
        self, topic: str, offset: int, wait_ms: int, alive: Callable[[], bool], fetch: Fetch, end: int | None = None
    ) -> PullResult:
        """One pull: ``fetch`` from ``offset`` until something is kept (OK), the queue is
        caught up (MESSAGE_NOT_FOUND, after waiting up to ``wait_ms`` for an arrival in
        ``topic``), ``end`` is reached (MESSAGE_NOT_FOUND: all before it was filtered out; the
        fetch must not read past ``end``), or the offset is gone (ILLEGAL_OFFSET)."""
        deadline = self._clock.monotonic_s() + wait_ms / 1000
        low = high = -1
        for _ in range(PULL_ROUNDS_MAX):
            if end is not None and offset >= end:
                return PullResult(
                    Code.MESSAGE_NOT_FOUND,
                    "no matching message before the end offset",
                    offset,
                    min_offset=low,
                    max_offset=high,
                )
            parked = self._hub.park((topic,)) if wait_ms > 0 else None
            try:
                got = fetch(offset)
                low, high = got.min_offset, got.max_offset
                if got.status is GetStatus.OFFSET_TOO_SMALL:
                    return PullResult(
                        Code.ILLEGAL_OFFSET,
                        f"offset {offset} is below the queue's min offset {got.min_offset} (removed by retention)",
                        got.min_offset,
                        min_offset=low,
                        max_offset=high,
                    )
                if got.status is GetStatus.OFFSET_OVERFLOW_BADLY or (
                    got.status is GetStatus.NO_MESSAGE_IN_QUEUE and offset > got.max_offset
                ):
                    return PullResult(
                        Code.ILLEGAL_OFFSET,
                        f"offset {offset} is beyond the queue's max offset {got.max_offset}",
                        got.max_offset,
                        min_offset=low,
                        max_offset=high,
                    )
                if got.status is GetStatus.FOUND and got.next_begin_offset > offset:
                    offset = got.next_begin_offset
                    if got.messages:
                        return PullResult(Code.OK, "OK", offset, got.messages, low, high)
                    continue  # everything read was filtered out (tags-code collisions, SQL): read on
                if (
                    got.status
                    in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_FOUND_NULL)
                    and got.next_begin_offset > offset
                ):
                    offset = got.next_begin_offset  # everything read was filtered out or removed
                    continue
                # Caught up (or an empty queue): wait for an arrival, then look again.
                if parked is None or self._closed or not self._wait(parked, deadline, alive):
                    return PullResult(Code.MESSAGE_NOT_FOUND, "no new message", offset, min_offset=low, max_offset=high)
            finally:
                if parked is not None:
                    self._hub.unpark(parked)
        return PullResult(Code.MESSAGE_NOT_FOUND, "no matching message yet", offset, min_offset=low, max_offset=high)

    def polling_ms(self, long_polling_ms: int | None, deadline_remaining_ms: int | None) -> int:
        """How long a pull may wait: the request's time, at most ``POLLING_MS_MAX`` and the
        deadline less ``DEADLINE_MARGIN_MS``; 0 when it asked for none."""
        if long_polling_ms is None or long_polling_ms <= 0:
            return 0
        wanted = min(long_polling_ms, POLLING_MS_MAX)
        if deadline_remaining_ms is not None:
            wanted = min(wanted, deadline_remaining_ms - DEADLINE_MARGIN_MS)
        return max(0, wanted)

    def _wait(self, parked: Parked, deadline: float, alive: Callable[[], bool]) -> bool:
        """Wait for an arrival; False at the deadline, when the caller left or on close."""
        while not parked.event.is_set():
            remaining_s = deadline - self._clock.monotonic_s()
            if remaining_s <= 0:
                return False
            parked.event.wait(min(remaining_s, ALIVE_CHECK_S))
            if self._closed or not alive():
                return False
        return not self._closed
