"""Topic routes over broker groups (issue 17): which groups hold a topic, with how many read and
write queues and which permission, and how a send picks its queue among all of them. Pure: no
I/O; the route's home (etcd) and its readers are elsewhere.

A route is RocketMQ's ``TopicRouteData`` reduced to its ``queueDatas``: one ``QueueData`` per
broker group (``brokerName``) with ``readQueueNums``, ``writeQueueNums``, ``perm`` and
``topicSysFlag``, in RocketMQ's JSON names, so a route read from etcd looks like one from a
RocketMQ name server. Queue ids start at 0 in each group.

Queue order is the RocketMQ 5 proxy's (``MessageQueueSelector``): every queue as (broker name,
queue id), sorted by broker name then id. A send picks among the write queues of that list:

* with a message group (FIFO): Guava's ``consistentHash`` of Java's ``String.hashCode`` of the
  group over the whole list. A group that is down keeps its place (its queues stay in the list,
  as RocketMQ marks a down group's queues unwritable instead of renumbering), so a message
  group's queue never moves while groups come and go; the send waits for its group or fails;
* otherwise round-robin over the list interleaved by group (queue 0 of each group, then queue 1
  of each, ...: ``spread_write_queues``), skipping the queues of groups that are down, so a send
  fails over to another group's queue. The proxy goes round-robin over the sorted list itself,
  which sends a run of as many messages as a group has queues to one group before the next;
  interleaved, consecutive sends alternate groups, and the counts per queue come out the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property

from services.domain.format.java_compat import java_string_hash_repeated

# RocketMQ's PermName bits.
PERM_INHERIT = 0x1
PERM_WRITE = 0x2
PERM_READ = 0x4
PERM_PRIORITY = 0x8
PERM_READ_WRITE = PERM_READ | PERM_WRITE

_LCG_MULTIPLIER = 2862933555777941757
_U64 = (1 << 64) - 1

Queue = tuple[str, int]  # (broker group name, queue id)


def guava_consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``: a bucket in [0, buckets)."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = key & _U64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _U64
        # ((int) (state >>> 33) + 1) / 2^31, with Java's int overflow of the "+ 1".
        numerator = (state >> 33) + 1
        if numerator == 1 << 31:
            numerator = -(1 << 31)
        next_double = numerator / 2147483648.0
        following = int((candidate + 1) / next_double)
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


def message_group_bucket(message_group: str, buckets: int) -> int:
    """The bucket of a FIFO message group among ``buckets`` write queues (the proxy's choice)."""
    return guava_consistent_hash(java_string_hash_repeated(message_group), buckets)


@dataclass(frozen=True)
class QueueData:
    """One broker group's share of a topic (RocketMQ's ``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    topic_sys_flag: int = 0

    def __post_init__(self) -> None:
        if not self.broker_name or "/" in self.broker_name:
            raise ValueError(f"broker group name {self.broker_name!r}: must be non-empty and contain no '/'")
        if self.read_queue_nums < 0 or self.write_queue_nums < 0:
            raise ValueError("queue numbers must not be negative")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, object]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_json(cls, value: dict[str, object]) -> QueueData:
        return cls(
            str(value["brokerName"]),
            _int(value["readQueueNums"]),
            _int(value["writeQueueNums"]),
            _int(value.get("perm", PERM_READ_WRITE)),
            _int(value.get("topicSysFlag", 0)),
        )


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class TopicRoute:
    """A topic's route: its message type and one QueueData per broker group, by group name."""

    topic: str
    message_type: str
    queue_datas: tuple[QueueData, ...] = ()

    def __post_init__(self) -> None:
        names = [q.broker_name for q in self.queue_datas]
        if len(set(names)) != len(names):
            raise ValueError(f"topic {self.topic}: a broker group appears twice in its route")
        object.__setattr__(self, "queue_datas", tuple(sorted(self.queue_datas, key=lambda q: q.broker_name)))

    @property
    def groups(self) -> list[str]:
        return [q.broker_name for q in self.queue_datas]

    def group(self, name: str) -> QueueData | None:
        return next((q for q in self.queue_datas if q.broker_name == name), None)

    def with_group(self, queue_data: QueueData) -> TopicRoute:
        """This route with ``queue_data`` added, or replacing the group's old one."""
        others = [q for q in self.queue_datas if q.broker_name != queue_data.broker_name]
        return replace(self, queue_datas=(*others, queue_data))

    def without_group(self, name: str) -> TopicRoute:
        return replace(self, queue_datas=tuple(q for q in self.queue_datas if q.broker_name != name))

    def write_queues(self) -> list[Queue]:
        """Every write queue of the writable groups, in the proxy's order; a group that is down
        keeps its queues here (its place in the route)."""
        return [(q.broker_name, i) for q in self.queue_datas if q.writable for i in range(q.write_queue_nums)]

    @cached_property
    def spread_write_queues(self) -> tuple[Queue, ...]:
        """The write queues interleaved by group: (a, 0), (b, 0), (a, 1), (b, 1), ... (routes are
        immutable: computed once per route)."""
        order = {name: i for i, name in enumerate(self.groups)}
        return tuple(sorted(self.write_queues(), key=lambda queue: (queue[1], order[queue[0]])))

    def read_queues(self) -> list[Queue]:
        return [(q.broker_name, i) for q in self.queue_datas if q.readable for i in range(q.read_queue_nums)]

    def encode(self) -> bytes:
        document = {
            "topic": self.topic,
            "messageType": self.message_type,
            "queueDatas": [q.to_json() for q in self.queue_datas],
        }
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> TopicRoute:
        """ValueError for anything that is not a route."""
        try:
            document = json.loads(data)
            return cls(
                str(document["topic"]),
                str(document.get("messageType", "NORMAL")),
                tuple(QueueData.from_json(q) for q in document.get("queueDatas", [])),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a topic route: {exc}") from None


def select_write_queue(
    route: TopicRoute, index: int, message_group: str = "", up: Callable[[str], bool] = lambda group: True
) -> Queue | None:
    """The queue a send goes to (see the module docstring): with ``message_group`` the group's
    fixed queue, whether its broker group is up or not (the caller waits or fails); otherwise
    the ``index``-th write queue round-robin, skipping groups that are not ``up``. None when the
    route has no write queue, or (no message group) every group with one is down."""
    if message_group:
        ordered = route.write_queues()
        return ordered[message_group_bucket(message_group, len(ordered))] if ordered else None
    queues = route.spread_write_queues
    for step in range(len(queues)):
        queue = queues[(index + step) % len(queues)]
        if up(queue[0]):
            return queue
    return None


def readable_groups(route: TopicRoute, groups: Iterable[str] | None = None) -> list[str]:
    """The groups a consumer reads the topic from (QueryAssignment: one assignment per group)."""
    wanted = set(groups) if groups is not None else None
    return [
        q.broker_name
        for q in route.queue_datas
        if q.readable and q.read_queue_nums > 0 and (wanted is None or q.broker_name in wanted)
    ]
