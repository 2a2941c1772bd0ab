"""Classic clients: who heartbeats to this broker (RocketMQ's ``ConsumerManager`` and
``ProducerManager``) and which client holds which queue lock (``RebalanceLockManager``). No
protocol here: the remoting door feeds heartbeats in and carries the notices out.

* **Consumers** (``heartbeat``): per consumer group, each client id with its connection, its
  subscriptions (topic -> ``Subscription`` with ``sub_version``), message model, consume type and
  where it starts; when a group's members change, each member's channel is told
  (``ClientChannel.members_changed``: the remoting door sends NOTIFY_CONSUMER_IDS_CHANGED, so
  they rebalance at once, not in 20 s).
  A client is dropped when its connection closes, when it unregisters, or after
  ``CLIENT_EXPIRE_MS`` (120 s) without a heartbeat (``expire``, RocketMQ's
  ``scanNotActiveChannel``).
* **Producers**: per producer group, each client id and its connection (transaction checks go to
  one of them: ``producer_channels``, read by ``transaction.TransactionCheckRelay``).
* **Queue locks** (``lock`` / ``unlock``, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ): a queue of a group
  is held by one client id for ``LOCK_EXPIRE_MS`` (60 s) after its last lock request; orderly
  consumers renew every 20 s.

One lock guards all of it (LOCKING.md: ``ClassicClients._lock``, a leaf: callbacks run after it
is released).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from services.broker.transaction import CheckChannel, TransactionCheck
from services.domain.remoting.bodies import MessageQueue
from services.runtime.clock import Clock

CLIENT_EXPIRE_MS = 120_000
LOCK_EXPIRE_MS = 60_000


class ClientChannel(Protocol):
    """A classic client's connection, as the core uses it (the remoting door's ``Channel``)."""

    closed: bool

    def members_changed(self, group: str) -> None:
        """Tell the client the group's members changed (oneway)."""

    def check_transaction(self, check: TransactionCheck) -> bool: ...


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str = "*"
    expression_type: str = "TAG"
    sub_version: int = 0
    tags: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    group: str
    channel: ClientChannel
    subscriptions: dict[str, Subscription]
    message_model: str = "CLUSTERING"
    consume_type: str = "CONSUME_PASSIVELY"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    language: str = ""
    version: int = 0
    address: str = ""
    last_heartbeat_ms: int = 0


@dataclass(slots=True)
class ProducerClient:
    client_id: str
    group: str
    channel: ClientChannel
    language: str = ""
    version: int = 0
    address: str = ""
    last_heartbeat_ms: int = 0


@dataclass(slots=True)
class _Lock:
    client_id: str
    renewed_ms: int


@dataclass
class _Group:
    consumers: dict[str, ConsumerClient] = field(default_factory=dict)


class ClassicClients:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._producers: dict[str, dict[str, ProducerClient]] = {}
        self._queue_locks: dict[tuple[str, MessageQueue], _Lock] = {}
        self._watchers: list[Callable[[str], None]] = []

    def watch_members(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(group)`` whenever a group's members change (after its channels are
        told; outside the lock). The remoting door answers the group's held pulls then."""
        self._watchers.append(listener)

    # -- heartbeats ----------------------------------------------------------------------------
    def consumer_heartbeat(self, consumer: ConsumerClient) -> bool:
        """Register or refresh a consumer; True if the group's members or the client's
        subscriptions changed."""
        consumer.last_heartbeat_ms = self._clock.now_ms()
        with self._lock:
            group = self._groups.setdefault(consumer.group, _Group())
            old = group.consumers.get(consumer.client_id)
            group.consumers[consumer.client_id] = consumer
            joined = old is None or old.channel is not consumer.channel
            changed = joined or old is None or old.subscriptions != consumer.subscriptions
        if joined:
            self._members_changed(consumer.group)
        return changed

    def producer_heartbeat(self, producer: ProducerClient) -> None:
        producer.last_heartbeat_ms = self._clock.now_ms()
        with self._lock:
            self._producers.setdefault(producer.group, {})[producer.client_id] = producer

    def unregister(self, client_id: str, consumer_group: str = "", producer_group: str = "") -> None:
        left: list[str] = []
        with self._lock:
            if consumer_group and self._drop_consumer(consumer_group, client_id):
                left.append(consumer_group)
            if producer_group:
                self._producers.get(producer_group, {}).pop(client_id, None)
        for group in left:
            self._members_changed(group)

    def channel_closed(self, channel: object) -> None:
        """A connection ended: every client on it leaves."""
        self._remove(lambda c: c.channel is channel)

    def expire(self) -> int:
        """Drop clients not heard from for CLIENT_EXPIRE_MS; how many were dropped."""
        limit = self._clock.now_ms() - CLIENT_EXPIRE_MS
        return self._remove(lambda c: c.last_heartbeat_ms < limit)

    def _remove(self, gone: Callable[[ConsumerClient | ProducerClient], bool]) -> int:
        left: set[str] = set()
        count = 0
        with self._lock:
            for name, group in list(self._groups.items()):
                for client_id, consumer in list(group.consumers.items()):
                    if gone(consumer):
                        self._drop_consumer(name, client_id)
                        left.add(name)
                        count += 1
            for producers in self._producers.values():
                for client_id, producer in list(producers.items()):
                    if gone(producer):
                        del producers[client_id]
                        count += 1
        for name in left:
            self._members_changed(name)
        return count

    def _drop_consumer(self, group_name: str, client_id: str) -> bool:
        group = self._groups.get(group_name)
        if group is None or group.consumers.pop(client_id, None) is None:
            return False
        if not group.consumers:
            del self._groups[group_name]
        for key in [k for k, lock in self._queue_locks.items() if k[0] == group_name and lock.client_id == client_id]:
            del self._queue_locks[key]
        return True

    def _members_changed(self, group: str) -> None:
        for consumer in self.consumers(group):
            if not consumer.channel.closed:
                consumer.channel.members_changed(group)
        for listener in self._watchers:
            listener(group)

    # -- reads -----------------------------------------------------------------------------------
    def consumers(self, group: str) -> list[ConsumerClient]:
        with self._lock:
            found = self._groups.get(group)
            return list(found.consumers.values()) if found is not None else []

    def consumer(self, group: str, client_id: str) -> ConsumerClient | None:
        with self._lock:
            found = self._groups.get(group)
            return found.consumers.get(client_id) if found is not None else None

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic`` (the newest sub_version among its members)."""
        best: Subscription | None = None
        for consumer in self.consumers(group):
            sub = consumer.subscriptions.get(topic)
            if sub is not None and (best is None or sub.sub_version > best.sub_version):
                best = sub
        return best

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    def all_consumers(self) -> list[ConsumerClient]:
        with self._lock:
            return [c for group in self._groups.values() for c in group.consumers.values()]

    def producers(self, group: str | None = None) -> list[ProducerClient]:
        with self._lock:
            if group is not None:
                return list(self._producers.get(group, {}).values())
            return [p for producers in self._producers.values() for p in producers.values()]

    def producer_channels(self, group: str) -> list[tuple[str, CheckChannel]]:
        """The group's producers' connections (transaction checks)."""
        return [(p.client_id, p.channel) for p in self.producers(group) if not p.channel.closed]

    def find_channel(self, client_id: str) -> ClientChannel | None:
        with self._lock:
            for group in self._groups.values():
                consumer = group.consumers.get(client_id)
                if consumer is not None:
                    return consumer.channel
            for producers in self._producers.values():
                producer = producers.get(client_id)
                if producer is not None:
                    return producer.channel
        return None

    # -- queue locks -------------------------------------------------------------------------------
    def lock(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> list[MessageQueue]:
        """Lock each queue for the client if free, expired or already its own; those it holds."""
        now_ms = self._clock.now_ms()
        held = []
        with self._lock:
            for queue in queues:
                key = (group, queue)
                current = self._queue_locks.get(key)
                if current is None or current.client_id == client_id or now_ms - current.renewed_ms > LOCK_EXPIRE_MS:
                    self._queue_locks[key] = _Lock(client_id, now_ms)
                    held.append(queue)
        return held

    def unlock(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None:
        with self._lock:
            for queue in queues:
                current = self._queue_locks.get((group, queue))
                if current is not None and current.client_id == client_id:
                    del self._queue_locks[(group, queue)]
