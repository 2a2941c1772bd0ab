"""AccessGuard: which resources and action each RPC needs, and the check the servicers run
before anything else when authentication (and authorization) is on (auth.py has the rules).

What a request needs, as RocketMQ 5's proxy asks (GrpcAuthorizationContextBuilder):

    SendMessage, EndTransaction, RecallMessage          Pub on each message's topic
    QueryRoute                                          Pub or Sub on the topic
    QueryAssignment, ReceiveMessage, AckMessage,        Sub on the topic and on the group
    ChangeInvisibleDuration, ForwardMessageToDLQ,
    SyncLiteSubscription,
    PullMessage, UpdateOffset, GetOffset
    QueryOffset                                         Sub on the topic
    pyrmq.pull.v1.Pull/PullRecords                      Sub on the topic (and the group, if named)
    Heartbeat, NotifyClientTermination                  Sub on the group, when one is named
    Telemetry                                           authentication only
    pyrmq.admin.v1.Admin (but CheckTransaction)         a Super user
    Admin.CheckTransaction                              none (internal: txcheck relays checks)

Users and ACLs come from the store (config/auth.json) through ``load``, re-read at most every
``cache_ttl_ms``; if the store cannot be read, the last copy is used and a first read fails the
request with INTERNAL_SERVER_ERROR (never "allow").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from services.broker.auth import (
    AccessDenied,
    Acl,
    Action,
    Authenticator,
    AuthError,
    Authorizer,
    ResourceType,
    User,
    UserStatus,
    UserType,
    policy_entry,
)
from services.broker.errors import FAILURES, BrokerError, Code
from services.runtime.clock import Clock
from services.store.client.model import PolicyView

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
Needs = tuple[list[tuple[ResourceType, str]], Action | tuple[Action, ...]]


def _name(resource: Any) -> str:
    return resource.name if resource is not None else ""


def _topic_and_group(topic: Any, group: Any) -> list[tuple[ResourceType, str]]:
    return [(TOPIC, _name(topic)), (GROUP, _name(group))]


def _group_if_named(request: Any) -> list[tuple[ResourceType, str]]:
    return [(GROUP, request.group.name)] if request.HasField("group") and request.group.name else []


NEEDS: dict[str, Callable[[Any], Needs]] = {
    "SendMessage": lambda r: ([(TOPIC, m.topic.name) for m in r.messages], Action.PUB),
    "EndTransaction": lambda r: ([(TOPIC, r.topic.name)], Action.PUB),
    "RecallMessage": lambda r: ([(TOPIC, r.topic.name)], Action.PUB),
    "QueryRoute": lambda r: ([(TOPIC, r.topic.name)], (Action.PUB, Action.SUB)),
    "QueryAssignment": lambda r: (_topic_and_group(r.topic, r.group), Action.SUB),
    "ReceiveMessage": lambda r: (_topic_and_group(r.message_queue.topic, r.group), Action.SUB),
    "AckMessage": lambda r: (_topic_and_group(r.topic, r.group), Action.SUB),
    "ChangeInvisibleDuration": lambda r: (_topic_and_group(r.topic, r.group), Action.SUB),
    "ForwardMessageToDeadLetterQueue": lambda r: (_topic_and_group(r.topic, r.group), Action.SUB),
    "SyncLiteSubscription": lambda r: (_topic_and_group(r.topic, r.group), Action.SUB),
    "PullMessage": lambda r: (_topic_and_group(r.message_queue.topic, r.group), Action.SUB),
    "UpdateOffset": lambda r: (_topic_and_group(r.message_queue.topic, r.group), Action.SUB),
    "GetOffset": lambda r: (_topic_and_group(r.message_queue.topic, r.group), Action.SUB),
    "QueryOffset": lambda r: ([(TOPIC, r.message_queue.topic.name)], Action.SUB),
    "Heartbeat": lambda r: (_group_if_named(r), Action.SUB),
    "NotifyClientTermination": lambda r: (_group_if_named(r), Action.SUB),
    "Telemetry": lambda r: ([], Action.SUB),
    "PullRecords": lambda r: (
        [(TOPIC, r.topic)] + ([(GROUP, r.consumer_group)] if r.consumer_group else []),
        Action.SUB,
    ),
}
UNGUARDED = frozenset({"CheckTransaction"})


@dataclass(frozen=True)
class AuthSnapshot:
    users: Mapping[str, User]
    acls: Mapping[str, Acl]
    version: int


StoredUsers = Iterable[tuple[str, str, str, str]]  # name, secret, type, status
StoredAcls = Iterable[tuple[str, Iterable[tuple[str, Iterable[str], str, Iterable[str]]]]]


def snapshot_of(users: StoredUsers, acls: StoredAcls, version: int) -> AuthSnapshot:
    """The store's words (config/auth.json) as auth.py's model."""
    return AuthSnapshot(
        users={name: User(name, secret, UserType(kind), UserStatus(status)) for name, secret, kind, status in users},
        acls={name: Acl(name, tuple(policy_entry(*p) for p in policies)) for name, policies in acls},
        version=version,
    )


class AuthConfigSource(Protocol):
    def auth_config(self) -> tuple[StoredUsers, list[tuple[str, list[PolicyView]]], int]: ...


def auth_snapshot(store: AuthConfigSource) -> AuthSnapshot:
    """The store's users and ACLs now (the store client's ``auth_config``) as auth.py's model."""
    users, acls, version = store.auth_config()
    return snapshot_of(
        users,
        [(name, [(p.resource, p.actions, p.decision, p.source_ips) for p in policies]) for name, policies in acls],
        version,
    )


class AccessGuard:
    """The one check every guarded RPC runs first. ``load`` reads the store's users and ACLs."""

    def __init__(
        self,
        load: Callable[[], AuthSnapshot],
        clock: Clock,
        authorization: bool = True,
        cache_ttl_ms: int = 3_000,
        max_clock_skew_s: int = 0,
        local_time_tolerant: bool = True,
    ) -> None:
        self._load = load
        self._clock = clock
        self._authorization = authorization
        self._ttl_s = cache_ttl_ms / 1000
        self._skew_s = max_clock_skew_s
        self._local_time_tolerant = local_time_tolerant
        self._lock = threading.Lock()
        self._snapshot: AuthSnapshot | None = None
        self._read_at = float("-inf")

    def _current(self) -> AuthSnapshot:
        with self._lock:
            if self._clock.monotonic_s() - self._read_at >= self._ttl_s or self._snapshot is None:
                try:
                    self._snapshot = self._load()
                    self._read_at = self._clock.monotonic_s()
                except FAILURES:
                    if self._snapshot is None:
                        raise BrokerError(
                            "users and ACLs cannot be read from the store", Code.INTERNAL_SERVER_ERROR
                        ) from None
            return self._snapshot

    def invalidate(self) -> None:
        """Re-read on the next request (after an admin change)."""
        with self._lock:
            self._read_at = float("-inf")

    def check_signed(
        self,
        access_key: str,
        signed_by: Callable[[str], bool],
        needs: Needs | None,
        peer: str,
    ) -> User:
        """A request signed some other way (the remoting door's AclClientRPCHook signature):
        ``signed_by(secret)`` says whether the user's secret made its signature. ``needs``: the
        resources and action (None: a Super user's request). AuthError / AccessDenied."""
        snapshot = self._current()
        user = snapshot.users.get(access_key)
        valid = signed_by(user.password if user else "\0")  # same work for unknown users
        if user is None or not valid:
            raise AuthError(f"signature does not match for access key {access_key!r}")
        if user.user_status is not UserStatus.ENABLE:
            raise AuthError(f"user {access_key!r} is disabled")
        if not self._authorization:
            return user
        if needs is None:
            if user.user_type is not UserType.SUPER:
                raise AccessDenied(f"this request is for Super users; {user.username!r} is not one")
            return user
        resources, action = needs
        Authorizer(snapshot.acls).check(user, resources, action, peer)
        return user

    def check(self, method: str, request: Any, metadata: Mapping[str, str], peer: str) -> User | None:
        """The authenticated user; AuthError (UNAUTHORIZED) or AccessDenied (FORBIDDEN)."""
        if method in UNGUARDED:
            return None
        snapshot = self._current()
        user = Authenticator(snapshot.users, self._clock, self._skew_s, self._local_time_tolerant).authenticate(
            metadata
        )
        if not self._authorization:
            return user
        needs = NEEDS.get(method)
        if needs is None:  # the admin service
            if user.user_type is not UserType.SUPER:
                raise AccessDenied(f"{method} is for Super users; {user.username!r} is not one")
            return user
        resources, action = needs(request)
        Authorizer(snapshot.acls).check(user, resources, action, peer)
        return user
