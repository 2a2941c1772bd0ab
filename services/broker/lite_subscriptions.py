"""Lite subscriptions (issue 18): which lite topics each lite consumer takes, and which of them may
have something to pop. No gRPC here; memory only, like the proxy's and the broker's registries
(a client that reconnects re-sends its whole set within 30 s: COMPLETE_ADD).

A lite consumer (LitePushConsumer, LiteSimpleConsumer) binds one consumer group to one LITE
parent topic and names the lite topics it wants with SyncLiteSubscription:

| action | what it does |
|---|---|
| PARTIAL_ADD (0) | adds the lite topics (quota: ``lite_subscription_quota`` per client, else 42902) |
| PARTIAL_REMOVE (1) | removes them |
| COMPLETE_ADD (2) | the client's whole set, every 30 s: replaces it, and keeps it alive |
| COMPLETE_REMOVE (3) | drops the client's subscription |

Exclusive groups (``lite.sub.model=Exclusive``): a lite topic has one client of the group at a
time; the newest PARTIAL_ADD takes it, and the previous holder is sent NotifyUnsubscribeLiteCommand
(the Java client drops the lite topic; the Python client ignores it, so its COMPLETE_ADD names it
again: it is told again and not given it back).

A client's subscription expires ``expire_ms`` (3 min) after its last sync, as RocketMQ drops a
lite consumer it has not heard from; NotifyClientTermination drops it at once.

Readiness. Each client keeps an ordered set of (broker group, LMQ) keys that may have something
to pop: its lite topics when they are subscribed, and every lite topic the store announces on
WatchArrivals (a message arrived, or an in-flight batch was acked or expired, which unlocks the
lite topic's queue). A receive pops the ready keys in order (``take``), and forgets those the
store examined (``examined``): they are locked, empty, or were locked, and the store announces
them again when that changes. A key announced again between ``take`` and ``examined`` stays
ready (each mark has a sequence number). A watch stream that restarts (arrivals may have been
missed) marks every subscription of that broker group ready.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from services.broker.errors import Code, RequestError
from services.domain.lite import LITE_TOPIC_PREFIX, lmq_name, split_lmq_name
from services.runtime.clock import Clock

LITE_SUBSCRIPTION_QUOTA = 2000  # ProxyConfig's default, sent in Settings
LITE_SUBSCRIPTION_EXPIRE_MS = 180_000  # no sync for 3 minutes: the client is gone

ReadyKey = tuple[str, str]  # (broker group, LMQ name)


class LiteAction(enum.IntEnum):
    PARTIAL_ADD = 0
    PARTIAL_REMOVE = 1
    COMPLETE_ADD = 2
    COMPLETE_REMOVE = 3


@dataclass(eq=False)
class LiteClient:
    client_id: str
    group: str
    topic: str  # the bind (parent) topic
    synced_ms: int
    lite_topics: set[str] = field(default_factory=set)
    ready: dict[ReadyKey, int] = field(default_factory=dict)  # key -> mark sequence, in mark order
    evicted: set[str] = field(default_factory=set)  # lite topics another client took (exclusive groups)
    wildcard: bool = False  # every lite topic of the parent (a lite.sub.wildcard group)
    wake: threading.Event = field(default_factory=threading.Event)


class LiteSubscriptions:
    def __init__(
        self,
        clock: Clock,
        broker_groups_of: Callable[[str], Iterable[str]],
        quota: int = LITE_SUBSCRIPTION_QUOTA,
        expire_ms: int = LITE_SUBSCRIPTION_EXPIRE_MS,
        on_wildcard_restart: Callable[[str, list[LiteClient]], None] = lambda broker_group, clients: None,
    ) -> None:
        """``broker_groups_of(topic)``: the broker groups holding a parent topic's queues;
        ``on_wildcard_restart(broker group, clients)``: mark that group's backlog for its wildcard
        clients after its arrival stream restarted (the backlog is the store's to list: the lite
        consumer's ``wildcard_restart``)."""
        self._clock = clock
        self._broker_groups_of = broker_groups_of
        self.quota = quota
        self._expire_ms = expire_ms
        self._lock = threading.Lock()
        self._clients: dict[str, LiteClient] = {}
        self._by_lmq: dict[str, set[LiteClient]] = {}
        self._wildcard: dict[str, set[LiteClient]] = {}  # parent topic -> its wildcard clients
        self._sequence = 0
        self._on_wildcard_restart = on_wildcard_restart

    # -- SyncLiteSubscription ----------------------------------------------------------------
    def sync(
        self,
        client_id: str,
        group: str,
        topic: str,
        action: LiteAction,
        lite_topics: Iterable[str],
        quota: int | None = None,
        exclusive: bool = False,
        wildcard: bool = False,
    ) -> list[tuple[str, str]]:
        """Apply one SyncLiteSubscription (names already validated; ``quota``: the group's, else
        the broker's). A client binds one group and topic: a sync for another pair replaces its
        subscription. ``exclusive`` (the group's ``lite.sub.model``): a PARTIAL_ADD takes each
        lite topic from the group's other clients, which must be told; they are returned as
        (client id, lite topic), and a COMPLETE_ADD of theirs that still names it is answered by
        telling them again rather than adding it back. ``wildcard`` (``lite.sub.wildcard``): a
        COMPLETE_ADD subscribes the client to every lite topic of the parent (the names it sends
        do not matter); a PARTIAL_ADD is refused (BAD_REQUEST), a PARTIAL_REMOVE does nothing."""
        if wildcard and action is LiteAction.PARTIAL_ADD:
            raise RequestError(
                f"lite group {group} is a wildcard group: it takes every lite topic of {topic}; "
                "subscribe all (COMPLETE_ADD), not one",
                Code.BAD_REQUEST,
            )
        names = set(lite_topics)
        limit = self.quota if quota is None else quota
        now = self._clock.now_ms()
        broker_groups = (
            list(self._broker_groups_of(topic)) if action in (LiteAction.PARTIAL_ADD, LiteAction.COMPLETE_ADD) else []
        )
        evicted: list[tuple[str, str]] = []
        with self._lock:
            self._expire_locked(now)
            client = self._clients.get(client_id)
            if client is not None and (client.group, client.topic) != (group, topic):
                self._drop_locked(client)
                client = None
            if action is LiteAction.COMPLETE_REMOVE:
                if client is not None:
                    self._drop_locked(client)
                return evicted
            if client is None:
                if action is LiteAction.PARTIAL_REMOVE:
                    return evicted
                client = self._clients[client_id] = LiteClient(client_id, group, topic, now)
            client.synced_ms = now
            if wildcard:
                if action is LiteAction.COMPLETE_ADD and not client.wildcard:
                    self._unsubscribe_locked(client, set(client.lite_topics))
                    client.wildcard = True
                    self._wildcard.setdefault(topic, set()).add(client)
                return evicted
            if action is LiteAction.PARTIAL_REMOVE:
                self._unsubscribe_locked(client, names)
                return evicted
            if action is LiteAction.COMPLETE_ADD:
                self._unsubscribe_locked(client, client.lite_topics - names)
                taken = names & client.evicted
                evicted += [(client_id, name) for name in sorted(taken)]  # told again
                names -= taken
                client.evicted &= taken
            added = names - client.lite_topics
            if len(client.lite_topics) + len(added) > limit:
                raise RequestError(
                    f"lite subscription quota exceeded: {len(client.lite_topics)} + {len(added)} > {limit}",
                    Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                )
            for name in sorted(added):
                lmq = lmq_name(topic, name)
                if exclusive:
                    client.evicted.discard(name)
                    for other in [c for c in self._by_lmq.get(lmq, ()) if c.group == group and c is not client]:
                        self._unsubscribe_locked(other, [name])
                        other.evicted.add(name)
                        evicted.append((other.client_id, name))
                client.lite_topics.add(name)
                self._by_lmq.setdefault(lmq, set()).add(client)
                for broker_group in broker_groups:  # a backlog may be waiting
                    self._mark_locked(client, (broker_group, lmq))
        if added:
            client.wake.set()
        return evicted

    def drop_client(self, client_id: str) -> None:
        """The client terminated: forget its subscription."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None:
                self._drop_locked(client)

    def client(self, client_id: str) -> LiteClient | None:
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None and self._clock.now_ms() - client.synced_ms > self._expire_ms:
                self._drop_locked(client)
                return None
            return client

    def clients(self) -> list[LiteClient]:
        with self._lock:
            self._expire_locked(self._clock.now_ms())
            return list(self._clients.values())

    def counts(self) -> tuple[int, int]:
        """(lite consumers, lite subscriptions summed over them)."""
        clients = self.clients()
        return len(clients), sum(len(c.lite_topics) for c in clients)

    # -- readiness ---------------------------------------------------------------------------
    def on_arrivals(self, broker_group: str, topics: Iterable[str]) -> None:
        """The store of ``broker_group`` announced these queues (only LMQ names matter here)."""
        woken: set[LiteClient] = set()
        with self._lock:
            for topic in topics:
                if not topic.startswith(LITE_TOPIC_PREFIX):
                    continue
                for client in self._by_lmq.get(topic, ()):
                    self._mark_locked(client, (broker_group, topic))
                    woken.add(client)
                if self._wildcard and (parent := parent_of(topic)) in self._wildcard:
                    for client in self._wildcard[parent]:
                        self._mark_locked(client, (broker_group, topic))
                        woken.add(client)
        for client in woken:
            client.wake.set()

    def on_restart(self, broker_group: str) -> None:
        """``broker_group``'s arrival stream (re)started: every subscription there may be ready."""
        with self._lock:
            clients = list(self._clients.values())
            for client in clients:
                if broker_group in self._broker_groups_of(client.topic):
                    for name in client.lite_topics:
                        self._mark_locked(client, (broker_group, lmq_name(client.topic, name)))
        for client in clients:
            client.wake.set()
        wildcards = [c for c in clients if c.wildcard]
        if wildcards:
            self._on_wildcard_restart(broker_group, wildcards)

    def mark(self, client: LiteClient, broker_group: str, lmqs: Iterable[str]) -> None:
        """These lite topics of ``broker_group`` may have something for the client (a backlog)."""
        with self._lock:
            if self._clients.get(client.client_id) is not client:
                return
            for lmq in lmqs:
                self._mark_locked(client, (broker_group, lmq))
        client.wake.set()

    def take(self, client: LiteClient, limit: int) -> list[tuple[ReadyKey, int]]:
        """Up to ``limit`` ready keys of the client, oldest mark first, with their marks."""
        with self._lock:
            out: list[tuple[ReadyKey, int]] = []
            for key, mark in client.ready.items():
                if len(out) >= limit:
                    break
                out.append((key, mark))
            return out

    def examined(self, client: LiteClient, taken: Iterable[tuple[ReadyKey, int]]) -> None:
        """The store looked at these keys: forget them unless marked again since ``take``."""
        with self._lock:
            for key, mark in taken:
                if client.ready.get(key) == mark:
                    del client.ready[key]

    # -- internals (under _lock) -------------------------------------------------------------
    def _mark_locked(self, client: LiteClient, key: ReadyKey) -> None:
        self._sequence += 1
        client.ready.pop(key, None)  # a key marked again goes to the back: the others first
        client.ready[key] = self._sequence

    def _unsubscribe_locked(self, client: LiteClient, names: Iterable[str]) -> None:
        for name in list(names):
            if name not in client.lite_topics:
                continue
            client.lite_topics.discard(name)
            lmq = lmq_name(client.topic, name)
            subscribers = self._by_lmq.get(lmq)
            if subscribers is not None:
                subscribers.discard(client)
                if not subscribers:
                    del self._by_lmq[lmq]
            for key in [k for k in client.ready if k[1] == lmq]:
                del client.ready[key]

    def _drop_locked(self, client: LiteClient) -> None:
        self._unsubscribe_locked(client, set(client.lite_topics))
        if client.wildcard:
            wildcards = self._wildcard.get(client.topic)
            if wildcards is not None:
                wildcards.discard(client)
                if not wildcards:
                    del self._wildcard[client.topic]
        client.ready.clear()
        if self._clients.get(client.client_id) is client:
            del self._clients[client.client_id]
        client.wake.set()  # a parked receive of it returns

    def _expire_locked(self, now_ms: int) -> None:
        for client in [c for c in self._clients.values() if now_ms - c.synced_ms > self._expire_ms]:
            self._drop_locked(client)


def parent_of(lmq: str) -> str | None:
    split = split_lmq_name(lmq)
    return None if split is None else split[0]
