"""services/broker/access.py: what each RPC needs, the guard's codes, and its cache of the
store's users and ACLs."""

from __future__ import annotations

import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s

from services.broker.access import AccessGuard, snapshot_of
from services.broker.auth import sign
from services.broker.errors import BrokerError, Code
from services.runtime.clock import ManualClock

DATE = "20261122T093015Z"
USERS = [("alice", "a-secret", "Normal", "enable"), ("root", "r-secret", "Super", "enable")]
ACLS = [
    (
        "alice",
        [
            ("Topic:orders", ["Pub"], "Allow", []),
            ("Topic:events", ["Sub"], "Allow", []),
            ("Group:billing", ["Sub"], "Allow", []),
        ],
    )
]


def signed(user: str, secret: str) -> dict[str, str]:
    return {
        "authorization": f"MQv2-HMAC-SHA1 Credential={user}, SignedHeaders=x-mq-date-time, "
        f"Signature={sign(secret, DATE)}",
        "x-mq-date-time": DATE,
    }


ALICE, ROOT = signed("alice", "a-secret"), signed("root", "r-secret")
PEER = "ipv4:127.0.0.1:50000"


def guard(authorization: bool = True, loads: list[int] | None = None, clock: ManualClock | None = None) -> AccessGuard:
    def load():
        if loads is not None:
            loads.append(1)
        return snapshot_of(USERS, ACLS, 1)

    return AccessGuard(load, clock or ManualClock(), authorization=authorization)


def code(method: str, request, metadata: dict[str, str], g: AccessGuard | None = None) -> Code:
    try:
        (g or guard()).check(method, request, metadata, PEER)
        return Code.OK
    except BrokerError as exc:
        return exc.code


def topic(name: str) -> d.Resource:
    return d.Resource(name=name)


def mq(name: str) -> d.MessageQueue:
    return d.MessageQueue(topic=topic(name))


CASES = [
    ("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("orders"))]), ALICE, Code.OK),
    ("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("events"))]), ALICE, Code.FORBIDDEN),
    (
        "SendMessage",
        s.SendMessageRequest(messages=[d.Message(topic=topic("orders")), d.Message(topic=topic("x"))]),
        ALICE,
        Code.FORBIDDEN,
    ),
    ("EndTransaction", s.EndTransactionRequest(topic=topic("orders")), ALICE, Code.OK),
    ("RecallMessage", s.RecallMessageRequest(topic=topic("events")), ALICE, Code.FORBIDDEN),
    ("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, Code.OK),  # Pub is enough
    ("QueryRoute", s.QueryRouteRequest(topic=topic("events")), ALICE, Code.OK),  # so is Sub
    ("QueryRoute", s.QueryRouteRequest(topic=topic("secret")), ALICE, Code.FORBIDDEN),
    ("ReceiveMessage", s.ReceiveMessageRequest(group=topic("billing"), message_queue=mq("events")), ALICE, Code.OK),
    (
        "ReceiveMessage",
        s.ReceiveMessageRequest(group=topic("other"), message_queue=mq("events")),
        ALICE,
        Code.FORBIDDEN,
    ),
    (
        "ReceiveMessage",
        s.ReceiveMessageRequest(group=topic("billing"), message_queue=mq("orders")),
        ALICE,
        Code.FORBIDDEN,
    ),
    ("AckMessage", s.AckMessageRequest(group=topic("billing"), topic=topic("events")), ALICE, Code.OK),
    (
        "ChangeInvisibleDuration",
        s.ChangeInvisibleDurationRequest(group=topic("billing"), topic=topic("orders")),
        ALICE,
        Code.FORBIDDEN,
    ),
    ("PullMessage", s.PullMessageRequest(group=topic("billing"), message_queue=mq("events")), ALICE, Code.OK),
    ("QueryOffset", s.QueryOffsetRequest(message_queue=mq("events")), ALICE, Code.OK),
    ("QueryOffset", s.QueryOffsetRequest(message_queue=mq("orders")), ALICE, Code.FORBIDDEN),
    ("Heartbeat", s.HeartbeatRequest(), ALICE, Code.OK),  # a producer names no group
    ("Heartbeat", s.HeartbeatRequest(group=topic("other")), ALICE, Code.FORBIDDEN),
    ("CreateTopic", None, ALICE, Code.FORBIDDEN),  # admin: Super only
    ("CreateTopic", None, ROOT, Code.OK),
    ("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("anything"))]), ROOT, Code.OK),
    ("CheckTransaction", None, {}, Code.OK),  # internal, unguarded
    ("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("orders"))]), {}, Code.UNAUTHORIZED),
    ("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), signed("alice", "wrong"), Code.UNAUTHORIZED),
    # Headers the server derives are never trusted: a client's copy changes nothing.
    (
        "SendMessage",
        s.SendMessageRequest(messages=[d.Message(topic=topic("events"))]),
        {**ALICE, "x-mq-authorization-ak": "root", "rpc-remote-address": "10.0.0.1"},
        Code.FORBIDDEN,
    ),
]


@pytest.mark.parametrize(
    "method, request_, metadata, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_rpc_needs_its_action(method: str, request_, metadata, expected: Code) -> None:
    assert code(method, request_, metadata) == expected


def test_authentication_without_authorization_lets_any_user_in() -> None:
    g = guard(authorization=False)
    assert code("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("x"))]), ALICE, g) == Code.OK
    assert code("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=topic("x"))]), {}, g) == Code.UNAUTHORIZED


def test_users_are_cached_for_the_ttl_and_reread_after_invalidate() -> None:
    loads: list[int] = []
    clock = ManualClock()
    g = guard(loads=loads, clock=clock)
    for _ in range(5):
        g.check("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, PEER)
    assert len(loads) == 1
    clock.advance_ms(3_000)
    g.check("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, PEER)
    g.invalidate()
    g.check("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, PEER)
    assert len(loads) == 3


def test_a_store_that_cannot_be_read_never_means_allow() -> None:
    calls = []

    def load():
        calls.append(1)
        if len(calls) > 1:
            raise BrokerError("store down")
        return snapshot_of(USERS, ACLS, 1)

    clock = ManualClock()
    g = AccessGuard(load, clock)
    g.check("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, PEER)
    clock.advance_ms(10_000)
    g.check("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, PEER)  # the last copy
    failing = AccessGuard(lambda: (_ for _ in ()).throw(BrokerError("store down")), clock)
    assert code("QueryRoute", s.QueryRouteRequest(topic=topic("orders")), ALICE, failing) == Code.INTERNAL_SERVER_ERROR
