"""AdminService: operators' calls on topics, consumer groups, consumer progress and messages
(``pyrmq.admin.v1.Admin``; no gRPC here, ``v2/admin_servicer.py`` is the shell).

The broker keeps nothing: each call is a few store calls through ``AdminStore`` (implemented
by the store client, ``services.store.client``). Names are checked with the rules the send and
receive paths use (``validation.validate_topic``, ``consumer.validate_group``: RocketMQ's
TopicValidator, system topics and groups refused), so nothing created here is refused later.

Creates are create-or-update, like RocketMQ's ``updateTopic`` / ``updateSubGroup``, but a value
the caller leaves unset keeps the stored one (a new topic or group takes the default): calling
``create_topic("Orders", "FIFO")`` on a 16-queue topic must not shrink it to 8 queues and strand
the messages of queues 8-15. Fields this API does not expose (permission, other attributes)
are never changed.

Consumer progress (RocketMQ's ``consumerProgress``): for each topic the group has committed
offsets in (or the one asked for), for each read queue, the queue's min and max offset and the
group's committed offset. ``lag = max_offset - max(consumer_offset, min_offset)``: messages
below the min offset are gone, not pending; a queue the group has no offset in yet (it never
received from the topic) counts from its min offset, an upper bound (where it starts is decided
at its first receive, the store's ``consume_init``). In-flight (popped, unacked) counts are not
reported there.

Consumer offset reset (``pyrmq consumer reset``, RocketMQ's ``mqadmin resetOffsetByTime``):
the group's committed offset in every read queue of a topic becomes the first offset stored at
or after a time (``offset_by_timestamp``; the max offset if none is), the min or max offset,
or a given offset brought within [min, max] (beyond either end the pop engine would move it
there at the next receive anyway). The store's pop engine restarts the group's state in each
queue at the new offset (in-flight messages of the queue are delivered again from there).

Cluster status (``pyrmq status``): every topic with its queues' min and max offsets (messages
stored: the sum of ``max_offset - min_offset``) and, per consumer group and topic, the
consumer-progress queues above plus the messages in flight (the store's GetConsumerStats).
One store call per queue of every topic and one per group; a queue is read once even if
several groups consume it. The groups are the store's subscription groups and every group the
store has offsets or messages in flight for (a v2 consumer's group need not be created first).

Message lookup: by key, the store's IndexFile (topic + a KEYS word or a UNIQ_KEY); by id, the
client's id is a UNIQ_KEY (indexed too) and an offset message id (32 or 56 hex characters)
names a CommitLog offset. A 4.x UNIQ_KEY is also 32 hex characters, so an id is tried both
ways; without a topic, every non-system topic's index is searched (one store call per topic).
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.broker.consumer import validate_group
from services.broker.errors import Code, NotFoundError, RequestError
from services.broker.lite_admin import consumed_lite_topics, lite_lag, split_committed
from services.broker.validation import validate_key, validate_message_id, validate_topic
from services.domain.group_attributes import validate_group_attribute
from services.domain.lite import LITE_EXPIRATION_ATTRIBUTE, split_lmq_name, validate_topic_attribute
from services.domain.names import (
    is_system_group,
    is_system_topic,
    pop_retry_topic,
    validate_group_name,
    validate_topic_name,
)
from services.domain.retry_policy import GroupRetryPolicy
from services.domain.topic_types import DEFAULT_MAX_PRIORITY, TOPIC_MESSAGE_TYPES
from services.store.client.model import ConsumerStats, GroupInfo, LiteTopicView, StoredMessage, TopicInfo

log = logging.getLogger(__name__)

TOPIC_QUEUE_NUMS_DEFAULT = 8  # mqadmin updateTopic's -r / -w default
TOPIC_QUEUE_NUMS_MAX = 1024
MAX_DELIVERY_ATTEMPTS_DEFAULT = 17  # RocketMQ's 16 retries (retryMaxTimes) + the first delivery
MAX_DELIVERY_ATTEMPTS_MAX = 1000
QUERY_MESSAGES_DEFAULT = 32
QUERY_MESSAGES_MAX = 64  # the store's IndexFile query cap (maxMsgsNumBatch)
# An offset message id: store host (IPv4 4 + port 4, or IPv6 16 + port 4) + phy offset 8, in hex.
_OFFSET_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")

CONSUMER_STATS_TIMEOUT_S = 5.0  # the store's GetConsumerStats walks every offset: allow it time

__all__ = [
    "AdminService",
    "AdminStore",
    "ClusterStatus",
    "ConsumerProgress",
    "GroupTopicStatus",
    "QueueOffsets",
    "QueueProgress",
    "QueueReset",
    "ResetPosition",
    "TopicStatus",
]


class ResetPosition(enum.Enum):
    EARLIEST = "earliest"  # each queue's min offset
    LATEST = "latest"  # each queue's max offset


@dataclass(frozen=True, slots=True)
class QueueReset:
    queue_id: int
    old_offset: int  # -1: the group had none
    new_offset: int
    broker_name: str = ""  # the broker group of the queue (services/broker/cluster_admin.py)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    queue_id: int
    min_offset: int
    broker_offset: int  # the queue's max offset (next to be written)
    consumer_offset: int  # the group's next offset to consume; -1: none committed
    lag: int
    broker_name: str = ""  # the broker group of the queue (services/broker/cluster_admin.py)
    lite_topic: str = ""  # a lite topic of the LITE parent ``topic`` (queue 0 of its LMQ)


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    group: str
    queues: list[QueueProgress]
    unreachable: tuple[str, ...] = ()  # broker groups whose store did not answer (partial)

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int  # next to be written; 0: the queue never held a message
    broker_name: str = ""  # the broker group of the queue


@dataclass(frozen=True, slots=True)
class TopicStatus:
    topic: TopicInfo
    queues: list[QueueOffsets]
    broker_groups: tuple[str, ...] = ()  # the groups holding it (services/broker/cluster_admin.py)
    lite_topic_count: int = 0  # a LITE parent: its lite topics holding messages

    @property
    def message_count(self) -> int:
        return sum(max(0, q.max_offset - q.min_offset) for q in self.queues)


@dataclass(frozen=True, slots=True)
class GroupTopicStatus:
    group: str
    topic: str  # "": the group has consumed nothing yet
    queues: list[QueueProgress]
    inflight_messages: int
    lite_topic_count: int = 0  # a LITE parent: the lite topics the group has consumed
    lite_lag: int = 0  # and their summed lag (no row per lite topic)

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues) + self.lite_lag


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    store_address: str  # "": unknown
    topics: list[TopicStatus]
    groups: list[GroupTopicStatus]
    broker_groups: list[BrokerGroupStatus] = field(default_factory=list)  # every broker group asked


@dataclass(frozen=True, slots=True)
class BrokerGroupStatus:
    """A broker group as a cluster-wide call found it."""

    name: str
    store_address: str  # its store as this broker reaches it ("" when it failed before saying)
    error: str  # why it did not answer ("": it did)


class AdminStore(Protocol):
    """The store calls the admin service makes. Failures raise BrokerError (StoreCallError)."""

    def get_topic(self, name: str) -> TopicInfo | None: ...
    def list_topics(self) -> list[TopicInfo]: ...

    def update_topic(
        self, name: str, queue_nums: int, message_type: str, attributes: dict[str, str] | None = None
    ) -> TopicInfo:
        """Create or update: set the type and, unless ``queue_nums`` is 0, the read and write
        queue nums, and ``attributes`` over the stored ones; keep every other field."""

    def delete_topic(self, name: str) -> bool:
        """Whether the topic existed."""

    def get_group(self, name: str) -> GroupInfo | None: ...
    def list_groups(self) -> list[GroupInfo]: ...

    def update_group(
        self,
        name: str,
        fifo: bool,
        retry_max_times: int,
        retry_policy: GroupRetryPolicy | None = None,
        attributes: dict[str, str] | None = None,
    ) -> GroupInfo:
        """Create or update: set consume_message_orderly, retry_max_times and (unless None) the
        retry policy and the attributes (replacing them); keep other fields."""

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        """Every committed (topic, queue_id, offset) of the group."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset) of one queue; (0, 0) for a queue that never held a message."""

    def lite_topic_count(self, parent: str) -> int: ...
    def group_lite_parents(self, group: str) -> list[str]: ...
    def list_lite_topics(
        self, parent: str, group: str = "", backlog_only: bool = False, after: str = "", limit: int = 0
    ) -> tuple[list[LiteTopicView], str]: ...

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (the max offset if none is)."""

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def consumer_stats(self, timeout_s: float) -> list[ConsumerStats]:
        """Lag, in-flight, ready and dead-lettered messages of every consumer group, by topic."""

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]: ...

    def look_message_by_offset_msg_id(self, offset_msg_id: str) -> StoredMessage | None:
        """The record the id names; None if there is none or the id does not decode."""


class AdminService:
    """``on_topic_changed(name)`` is called after a topic is created, updated or deleted (the
    broker drops its cached config, so sends see the change at once). ``store_address`` is
    only reported (cluster status): read when asked, so a client that follows a replica set's
    master reports the current one."""

    def __init__(
        self,
        store: AdminStore,
        on_topic_changed: Callable[[str], None] = lambda name: None,
        store_address: Callable[[], str] = lambda: "",
    ) -> None:
        self._store = store
        self._on_topic_changed = on_topic_changed
        self._store_address = store_address

    # -- topics ----------------------------------------------------------------------------
    def create_topic(
        self, name: str, message_type: str = "", queue_nums: int = 0, attributes: dict[str, str] | None = None
    ) -> tuple[TopicInfo, bool]:
        """(the stored topic, whether it is new). Unset ("" / 0 / None) values keep the stored ones.
        ``attributes``: topic attributes set (``lite.topic.expiration``, minutes, for a LITE topic)."""
        validate_topic(name)
        for key, value in (attributes or {}).items():
            if reason := validate_topic_attribute(key, value):
                raise RequestError(reason)
        if message_type and message_type not in TOPIC_MESSAGE_TYPES:
            raise RequestError(f"message type must be one of {', '.join(TOPIC_MESSAGE_TYPES)}, not {message_type}")
        if queue_nums and not 1 <= queue_nums <= TOPIC_QUEUE_NUMS_MAX:
            raise RequestError(f"queue count must be in [1, {TOPIC_QUEUE_NUMS_MAX}], not {queue_nums}")
        existing = self._store.get_topic(name)
        if existing is None:
            message_type = message_type or "NORMAL"
            if not queue_nums:  # a PRIORITY topic's queues are its levels: 0-9 by default
                queue_nums = DEFAULT_MAX_PRIORITY + 1 if message_type == "PRIORITY" else TOPIC_QUEUE_NUMS_DEFAULT
        else:  # 0 queues: the stored read and write counts stay (they may differ, e.g. mid-shrink)
            message_type = message_type or existing.message_type
        if attributes and LITE_EXPIRATION_ATTRIBUTE in attributes and message_type != "LITE":
            raise RequestError(f"{LITE_EXPIRATION_ATTRIBUTE} is for LITE topics, not {message_type}")
        topic = self._store.update_topic(name, queue_nums, message_type, attributes)
        self._on_topic_changed(name)
        log.info(
            "%s topic %s (%s, %d queues)",
            "created" if existing is None else "updated",
            name,
            topic.message_type,
            topic.write_queue_nums,
        )
        return topic, existing is None

    def list_topics(self, include_system: bool = False) -> list[TopicInfo]:
        topics = self._store.list_topics()
        return sorted((t for t in topics if include_system or not is_system_topic(t.name)), key=lambda t: t.name)

    def delete_topic(self, name: str) -> None:
        validate_topic(name)
        existed = self._store.delete_topic(name)
        self._on_topic_changed(name)
        if not existed:
            raise NotFoundError(f"topic {name} does not exist", Code.TOPIC_NOT_FOUND)
        log.info("deleted topic %s", name)

    # -- groups ----------------------------------------------------------------------------
    def create_group(
        self,
        name: str,
        fifo: bool | None = None,
        max_delivery_attempts: int = 0,
        retry_policy: GroupRetryPolicy | None = None,
        must_exist: bool = False,
        attributes: dict[str, str] | None = None,
        removed_attributes: Sequence[str] = (),
    ) -> tuple[GroupInfo, bool]:
        """(the stored group, whether it is new). Unset (None / 0) values keep the stored ones
        (a new group: not FIFO, 17 deliveries, RocketMQ's default retry policy). ``must_exist``:
        NotFoundError rather than creating the group."""
        validate_group(name)
        if max_delivery_attempts and not 1 <= max_delivery_attempts <= MAX_DELIVERY_ATTEMPTS_MAX:
            raise RequestError(
                f"max delivery attempts must be in [1, {MAX_DELIVERY_ATTEMPTS_MAX}], not {max_delivery_attempts}"
            )
        if retry_policy is not None:
            try:
                retry_policy.check()
            except ValueError as exc:
                raise RequestError(f"illegal retry policy: {exc}") from None
        for key, value in (attributes or {}).items():
            if reason := validate_group_attribute(key, value):
                raise RequestError(reason)
        existing = self._store.get_group(name)
        if existing is None and must_exist:
            raise NotFoundError(f"consumer group {name} does not exist", Code.CONSUMER_GROUP_NOT_FOUND)
        if fifo is None:
            fifo = existing.consume_message_orderly if existing is not None else False
        if max_delivery_attempts:
            retry_max_times = max_delivery_attempts - 1
        else:
            retry_max_times = existing.retry_max_times if existing is not None else MAX_DELIVERY_ATTEMPTS_DEFAULT - 1
        merged = None
        if attributes or removed_attributes:
            merged = {k: v for k, v in (existing.attributes if existing else {}).items() if k not in removed_attributes}
            merged.update(attributes or {})
        group = self._store.update_group(name, fifo, retry_max_times, retry_policy, merged)
        log.info(
            "%s group %s (fifo=%s, %d deliveries, retry policy %s)",
            "created" if existing is None else "updated",
            name,
            group.consume_message_orderly,
            group.retry_max_times + 1,
            group.retry_policy.describe(),
        )
        return group, existing is None

    def list_groups(self, include_system: bool = False) -> list[GroupInfo]:
        groups = self._store.list_groups()
        return sorted((g for g in groups if include_system or not is_system_group(g.name)), key=lambda g: g.name)

    # -- consumer progress -------------------------------------------------------------------
    def consumer_progress(self, group: str, topic: str = "") -> ConsumerProgress:
        _check_group_name(group)
        if self._store.get_group(group) is None:
            raise NotFoundError(f"consumer group {group} does not exist", Code.CONSUMER_GROUP_NOT_FOUND)
        committed, parents = self._committed_and_lite(group)
        if topic:
            info = self._require_topic(topic)
            # and the group's retry topic for it (RocketMQ 5 pop's %RETRY%{group}_{topic}), if used
            retry = pop_retry_topic(group, topic)
            topics = sorted({topic, retry} if retry in committed else {topic})
            parents = {topic} if info.message_type == "LITE" else set()
            topics = [] if parents else topics  # a LITE topic is consumed through its lite topics
        else:
            topics = sorted(committed)
        queues = []
        for name in topics:
            # None: deleted since; report the committed queues
            queues += _progress(name, self._store.get_topic(name), committed.get(name, {}), self._store.queue_offsets)
        for parent in sorted(parents):  # a row per lite topic the group consumed
            queues += [
                QueueProgress(
                    parent, 0, row.min_offset, row.max_offset, row.consumer_offset, lag, lite_topic=row.lite_topic
                )
                for row, lag in consumed_lite_topics(self._store, group, parent)
            ]
        return ConsumerProgress(group, queues)

    def reset_consumer_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp_ms: int | None = None,
        position: ResetPosition | None = None,
        offset: int | None = None,
    ) -> list[QueueReset]:
        """Move the group in every read queue of ``topic`` to exactly one of: the first message
        stored at or after ``timestamp_ms``, ``position``, ``offset`` (within [min, max])."""
        if (timestamp_ms is None) + (position is None) + (offset is None) != 2:
            raise RequestError("reset to exactly one of a timestamp, earliest / latest, or an offset")
        if (timestamp_ms is not None and timestamp_ms < 0) or (offset is not None and offset < 0):
            raise RequestError("the timestamp or offset to reset to must not be negative")
        _check_group_name(group)
        if self._store.get_group(group) is None:
            raise NotFoundError(f"consumer group {group} does not exist", Code.CONSUMER_GROUP_NOT_FOUND)
        _check_topic_name(topic)
        info = self._store.get_topic(topic)
        if info is None:
            raise NotFoundError(f"topic {topic} does not exist", Code.TOPIC_NOT_FOUND)
        committed = self._committed_offsets(group).get(topic, {})
        resets = []
        for queue_id in range(info.read_queue_nums):
            min_offset, max_offset = self._store.queue_offsets(topic, queue_id)
            if timestamp_ms is not None:
                new_offset = self._store.offset_by_timestamp(topic, queue_id, timestamp_ms)
            elif position is not None:
                new_offset = min_offset if position is ResetPosition.EARLIEST else max_offset
            else:
                assert offset is not None
                new_offset = min(max(offset, min_offset), max_offset)
            self._store.commit_consumer_offset(group, topic, queue_id, new_offset)
            resets.append(QueueReset(queue_id, committed.get(queue_id, -1), new_offset))
        log.info("reset group %s on topic %s: %s", group, topic, [(r.queue_id, r.new_offset) for r in resets])
        return resets

    def _committed_offsets(self, group: str) -> dict[str, dict[int, int]]:
        """topic -> queue id -> the group's committed offset."""
        committed: dict[str, dict[int, int]] = {}
        for topic, queue_id, offset in self._store.group_offsets(group):
            committed.setdefault(topic, {})[queue_id] = offset
        return committed

    # -- cluster status ----------------------------------------------------------------------
    def cluster_status(self, include_system: bool = False) -> ClusterStatus:
        """Every topic's queue offsets and every (group, topic)'s lag and in-flight count."""
        read: dict[tuple[str, int], tuple[int, int]] = {}

        def queue_offsets(topic: str, queue_id: int) -> tuple[int, int]:
            if (topic, queue_id) not in read:
                read[(topic, queue_id)] = self._store.queue_offsets(topic, queue_id)
            return read[(topic, queue_id)]

        topics = {t.name: t for t in self.list_topics(include_system)}
        topic_status = [
            TopicStatus(
                info,
                [
                    QueueOffsets(q, *queue_offsets(name, q))
                    for q in range(max(info.read_queue_nums, info.write_queue_nums))
                ],
                lite_topic_count=self._store.lite_topic_count(name) if info.message_type == "LITE" else 0,
            )
            for name, info in topics.items()
        ]
        in_flight: dict[str, dict[str, int]] = {g.name: {} for g in self.list_groups(include_system)}
        for stats in self._store.consumer_stats(CONSUMER_STATS_TIMEOUT_S):
            if include_system or not is_system_group(stats.group):
                in_flight.setdefault(stats.group, {})[stats.topic] = stats.inflight_messages
        groups = []
        for group in sorted(in_flight):
            committed, parents = self._committed_and_lite(group)
            lite_in_flight: dict[str, int] = {}
            for name, count in in_flight[group].items():
                if (lite := split_lmq_name(name)) is not None:
                    lite_in_flight[lite[0]] = lite_in_flight.get(lite[0], 0) + count
                    parents.add(lite[0])
            plain = {n for n in in_flight[group] if split_lmq_name(n) is None}
            names = sorted(committed.keys() | plain | parents)
            if not names:
                groups.append(GroupTopicStatus(group, "", [], 0))
            for name in names:
                info = topics[name] if name in topics else self._store.get_topic(name)
                if name in parents:  # one row for all its lite topics the group consumed
                    count, lag = lite_lag(self._store, group, name)
                    groups.append(GroupTopicStatus(group, name, [], lite_in_flight.get(name, 0), count, lag))
                    continue
                queues = _progress(name, info, committed.get(name, {}), queue_offsets)
                groups.append(GroupTopicStatus(group, name, queues, in_flight[group].get(name, 0)))
        return ClusterStatus(self._store_address(), topic_status, groups)

    # -- messages ----------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int = 0) -> list[StoredMessage]:
        """Messages of ``topic`` with ``key`` (a KEYS word or a UNIQ_KEY); [] if none."""
        if not topic:
            raise RequestError("a topic is required to query by key", Code.ILLEGAL_TOPIC)
        if not key:
            raise RequestError("the key must not be empty", Code.ILLEGAL_MESSAGE_KEY)
        validate_key(key)
        max_num = _query_limit(max_num)
        self._require_topic(topic)
        return sorted(self._store.query_messages_by_key(topic, key, max_num), key=_commitlog_order)

    def query_by_id(self, message_id: str, topic: str = "", max_num: int = 0) -> list[StoredMessage]:
        """The message(s) with this id (copies in retry / DLQ topics share it); NotFoundError if
        none. ``topic`` narrows a client-id search to one topic."""
        validate_message_id(message_id)
        max_num = _query_limit(max_num)
        if topic:
            self._require_topic(topic)
            found = self._by_uniq_key(topic, message_id, max_num)
        else:
            found = []
        if not found and _OFFSET_MSG_ID.fullmatch(message_id):
            record = self._store.look_message_by_offset_msg_id(message_id.upper())
            if record is not None and (not topic or record.topic == topic):
                found = [record]
        if not found and not topic:
            for info in self.list_topics():
                found += self._by_uniq_key(info.name, message_id, max_num - len(found))
                if len(found) >= max_num:
                    break
        if not found:
            where = f" in topic {topic}" if topic else ""
            raise NotFoundError(f"no message with id {message_id}{where}", Code.MESSAGE_NOT_FOUND)
        return sorted(found, key=_commitlog_order)

    def _by_uniq_key(self, topic: str, message_id: str, max_num: int) -> list[StoredMessage]:
        # The index also holds KEYS words: a producer key equal to some id must not match.
        return [m for m in self._store.query_messages_by_key(topic, message_id, max_num) if m.message_id == message_id]

    def _committed_and_lite(self, group: str) -> tuple[dict[str, dict[int, int]], set[str]]:
        """(the group's offsets in ordinary topics, the LITE parents it has lite topic offsets under)."""
        committed, parents = split_committed(self._committed_offsets(group))  # a store from before
        return committed, parents | set(self._store.group_lite_parents(group))

    def _require_topic(self, name: str) -> TopicInfo:
        _check_topic_name(name)
        info = self._store.get_topic(name)
        if info is None:
            raise NotFoundError(f"topic {name} does not exist", Code.TOPIC_NOT_FOUND)
        return info


def _progress(
    topic: str, info: TopicInfo | None, committed: dict[int, int], queue_offsets: Callable[[str, int], tuple[int, int]]
) -> list[QueueProgress]:
    """The group's progress in each read queue of ``topic`` and each queue it has an offset in
    (``committed``: queue id -> offset). ``lag = max_offset - max(consumer_offset, min_offset)``."""
    queues = []
    for queue_id in sorted(set(range(info.read_queue_nums if info else 0)) | set(committed)):
        min_offset, max_offset = queue_offsets(topic, queue_id)
        consumer_offset = committed.get(queue_id, -1)
        lag = max(0, max_offset - max(consumer_offset, min_offset))
        queues.append(QueueProgress(topic, queue_id, min_offset, max_offset, consumer_offset, lag))
    return queues


def _check_topic_name(name: str) -> None:
    """Lookups accept any legal name (system ones too); creates use the stricter checks."""
    reason = validate_topic_name(name)
    if reason:
        raise RequestError(reason, Code.ILLEGAL_TOPIC)


def _check_group_name(name: str) -> None:
    reason = validate_group_name(name)
    if reason:
        raise RequestError(reason, Code.ILLEGAL_CONSUMER_GROUP)


def _commitlog_order(message: StoredMessage) -> int:
    """Oldest first (the index answers newest first)."""
    return message.phy_offset


def _query_limit(max_num: int) -> int:
    if not max_num:
        return QUERY_MESSAGES_DEFAULT
    if not 1 <= max_num <= QUERY_MESSAGES_MAX:
        raise RequestError(f"max messages must be in [1, {QUERY_MESSAGES_MAX}], not {max_num}")
    return max_num
