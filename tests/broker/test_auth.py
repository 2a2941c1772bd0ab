"""services/broker/auth.py: the signature matrix (docs/durability.md, T0.7) and the ACL 2.0 evaluation
order, each case with its expected code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.broker.auth import (
    AccessDenied,
    Acl,
    Action,
    Authenticator,
    AuthError,
    Authorizer,
    Decision,
    PolicyEntry,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
    UserType,
    parse_authorization,
    sign,
)
from services.broker.errors import Code
from services.runtime.clock import ManualClock

DATE = "20261122T093015Z"
NOW_MS = 1_795_339_815_000  # 2026-11-22T09:30:15Z
USERS = {
    "alice": User("alice", "alice-secret"),
    "root": User("root", "root-secret", UserType.SUPER),
    "bob": User("bob", "bob-secret", user_status=UserStatus.DISABLE),
}


def header(ak: str, signature: str, signed: str = "x-mq-date-time") -> str:
    return f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders={signed}, Signature={signature}"


def authenticate(metadata: dict[str, str], skew_s: int = 0) -> User:
    return Authenticator(USERS, ManualClock(NOW_MS), max_clock_skew_s=skew_s).authenticate(metadata)


def test_the_official_python_clients_signature_is_accepted() -> None:
    # In its own process: the client's generated protos clash with ours in one descriptor pool.
    client_signature = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from rocketmq.v5.util.signature import Signature; print(Signature.sign('alice-secret', '{DATE}'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert client_signature == sign("alice-secret", DATE) and client_signature == client_signature.lower()
    user = authenticate({"authorization": header("alice", client_signature), "x-mq-date-time": DATE})
    assert user.username == "alice"


@pytest.mark.parametrize(
    "signature",
    [sign("alice-secret", DATE), sign("alice-secret", DATE).upper()],
    ids=["lowercase-hex-python", "uppercase-hex-java-node"],
)
def test_hex_case_does_not_matter(signature: str) -> None:
    assert authenticate({"authorization": header("alice", signature), "x-mq-date-time": DATE}).username == "alice"


def test_a_credential_scope_after_a_slash_is_ignored() -> None:
    metadata = {"authorization": header("alice/20261122/rocketmq", sign("alice-secret", DATE)), "x-mq-date-time": DATE}
    assert authenticate(metadata).username == "alice"


BAD = {
    "no-header": {"x-mq-date-time": DATE},
    "empty-header": {"authorization": "", "x-mq-date-time": DATE},
    "wrong-secret": {"authorization": header("alice", sign("not-it", DATE)), "x-mq-date-time": DATE},
    "unknown-user": {"authorization": header("mallory", sign("x", DATE)), "x-mq-date-time": DATE},
    "disabled-user": {"authorization": header("bob", sign("bob-secret", DATE)), "x-mq-date-time": DATE},
    "empty-credential-python-without-keys": {"authorization": header("", sign("", DATE)), "x-mq-date-time": DATE},
    "missing-date": {"authorization": header("alice", sign("alice-secret", DATE))},
    "other-date-signed": {
        "authorization": header("alice", sign("alice-secret", "20261122T093016Z")),
        "x-mq-date-time": DATE,
    },
    "wrong-algorithm": {
        "authorization": header("alice", sign("alice-secret", DATE)).replace("SHA1", "SHA256"),
        "x-mq-date-time": DATE,
    },
    "no-algorithm": {
        "authorization": "Credential=alice, SignedHeaders=x-mq-date-time, Signature=00",
        "x-mq-date-time": DATE,
    },
    "no-signature": {
        "authorization": "MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time",
        "x-mq-date-time": DATE,
    },
    "empty-signature": {"authorization": header("alice", ""), "x-mq-date-time": DATE},
    "signature-not-hex": {"authorization": header("alice", "zz" * 20), "x-mq-date-time": DATE},
    "truncated-signature": {"authorization": header("alice", sign("alice-secret", DATE)[:-2]), "x-mq-date-time": DATE},
    "other-signed-headers": {
        "authorization": header("alice", sign("alice-secret", DATE), "host"),
        "x-mq-date-time": DATE,
    },
    "no-equals": {"authorization": "MQv2-HMAC-SHA1 Credential alice", "x-mq-date-time": DATE},
    "garbage": {"authorization": "\x00\x01garbage", "x-mq-date-time": DATE},
    "only-algorithm": {"authorization": "MQv2-HMAC-SHA1", "x-mq-date-time": DATE},
    "bearer-token": {"authorization": "Bearer abc", "x-mq-date-time": DATE},
    "basic-auth": {"authorization": "Basic YWxpY2U6YWxpY2Utc2VjcmV0", "x-mq-date-time": DATE},
    "signature-of-secret-itself": {"authorization": header("alice", "alice-secret"), "x-mq-date-time": DATE},
    "empty-date": {"authorization": header("alice", sign("alice-secret", "")), "x-mq-date-time": ""},
}


@pytest.mark.parametrize("metadata", BAD.values(), ids=BAD.keys())
def test_bad_credentials_are_unauthorized(metadata: dict[str, str]) -> None:
    with pytest.raises(AuthError) as info:
        authenticate(metadata)
    assert info.value.code == Code.UNAUTHORIZED


def test_clock_skew_is_not_checked_by_default_and_enforced_when_configured() -> None:
    old = "20261121T093015Z"  # a day earlier: upstream accepts it (a replayable header)
    metadata = {"authorization": header("alice", sign("alice-secret", old)), "x-mq-date-time": old}
    assert authenticate(metadata).username == "alice"
    with pytest.raises(AuthError, match="from the broker's clock"):
        authenticate(metadata, skew_s=300)


@pytest.mark.parametrize(
    "date_time, ok",
    [
        ("20261122T093015Z", True),  # UTC
        ("20261122T190015Z", True),  # a UTC+9:30 host's local time marked Z (Adelaide)
        ("20261121T233015Z", True),  # UTC-10 (Honolulu)
        ("20261122T233015Z", True),  # UTC+14 (Kiritimati)
        ("20261122T093415Z", True),  # UTC, 4 minutes off: inside the 5-minute window
        ("20261122T094515Z", False),  # 15 minutes off: no zone is UTC+0:15
        ("20261122T151515Z", True),  # UTC+5:45 (Kathmandu)
        ("20261123T003015Z", False),  # UTC+15: no such zone
        ("20261121T093015Z", False),  # a day old: a replayed header
    ],
)
def test_the_replay_window_tolerates_local_time_marked_z(date_time: str, ok: bool) -> None:
    metadata = {"authorization": header("alice", sign("alice-secret", date_time)), "x-mq-date-time": date_time}
    if ok:
        assert authenticate(metadata, skew_s=300).username == "alice"
    else:
        with pytest.raises(AuthError, match="from the broker's clock"):
            authenticate(metadata, skew_s=300)
    bad = {"authorization": header("alice", sign("alice-secret", "yesterday")), "x-mq-date-time": "yesterday"}
    with pytest.raises(AuthError, match="must look like"):
        authenticate(bad, skew_s=60)


def test_parse_authorization() -> None:
    assert parse_authorization(header("AK", "ab12")) == ("AK", "x-mq-date-time", "ab12")


# -- authorization ---------------------------------------------------------------------------------

ALICE = USERS["alice"]


def entry(
    pattern: ResourcePattern,
    name: str,
    decision: Decision,
    actions=(Action.PUB,),
    ips=(),
    kind: ResourceType = ResourceType.TOPIC,
) -> PolicyEntry:
    return PolicyEntry(kind, name, pattern, frozenset(actions), decision, tuple(ips))


def allowed(
    policies: list[PolicyEntry],
    name: str = "orders",
    action: Action = Action.PUB,
    source: str = "ipv4:10.0.0.5:4242",
    kind: ResourceType = ResourceType.TOPIC,
    user: User = ALICE,
) -> bool:
    try:
        Authorizer({"alice": Acl("alice", tuple(policies))}).check(user, [(kind, name)], action, source)
        return True
    except AccessDenied as exc:
        assert exc.code == Code.FORBIDDEN
        return False


L, P, A = ResourcePattern.LITERAL, ResourcePattern.PREFIXED, ResourcePattern.ANY
ALLOW, DENY = Decision.ALLOW, Decision.DENY

MATRIX = [  # (policies, resource name, expected)
    ([], "orders", False),  # no match denies
    ([entry(L, "orders", ALLOW)], "orders", True),
    ([entry(L, "orders", ALLOW)], "orders2", False),
    ([entry(L, "orders", DENY)], "orders", False),
    ([entry(P, "ord", ALLOW)], "orders", True),
    ([entry(P, "ord", ALLOW)], "payments", False),
    ([entry(P, "ord", DENY)], "orders", False),
    ([entry(A, "*", ALLOW)], "anything", True),
    ([entry(A, "*", DENY)], "anything", False),
    ([entry(A, "*", ALLOW), entry(L, "orders", DENY)], "orders", False),  # literal beats any
    ([entry(A, "*", DENY), entry(L, "orders", ALLOW)], "orders", True),
    ([entry(P, "ord", ALLOW), entry(L, "orders", DENY)], "orders", False),  # literal beats prefixed (#9539)
    ([entry(P, "ord", DENY), entry(L, "orders", ALLOW)], "orders", True),
    ([entry(P, "o", DENY), entry(P, "ord", ALLOW)], "orders", True),  # the longer prefix wins
    ([entry(P, "o", ALLOW), entry(P, "ord", DENY)], "orders", False),
    ([entry(L, "orders", ALLOW), entry(L, "orders", DENY)], "orders", False),  # deny beats allow (#9784)
    ([entry(P, "ord", ALLOW), entry(P, "ord", DENY)], "orders", False),
    ([entry(A, "*", ALLOW), entry(A, "*", DENY)], "orders", False),
]


@pytest.mark.parametrize("policies, name, expected", MATRIX)
def test_policy_order(policies: list[PolicyEntry], name: str, expected: bool) -> None:
    assert allowed(policies, name) is expected
    assert allowed(list(reversed(policies)), name) is expected  # the order they were written in does not matter


def test_actions_resource_types_and_all() -> None:
    pub_only = [entry(L, "orders", ALLOW, actions=(Action.PUB,))]
    assert allowed(pub_only, action=Action.PUB) and not allowed(pub_only, action=Action.SUB)
    assert allowed([entry(L, "orders", ALLOW, actions=(Action.ALL,))], action=Action.SUB)
    group_rule = [entry(L, "orders", ALLOW, actions=(Action.SUB,), kind=ResourceType.GROUP)]
    assert not allowed(group_rule, action=Action.SUB, kind=ResourceType.TOPIC)
    assert allowed(group_rule, action=Action.SUB, kind=ResourceType.GROUP)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("ipv4:10.0.0.5:4242", True),
        ("ipv4:10.1.0.5:4242", False),
        ("ipv6:[::1]:4242", False),
        ("ipv6:[fd00::7]:1", True),
        ("unix:/tmp/sock", False),
        ("10.0.0.9", True),
    ],
)
def test_source_addresses_come_from_the_connection(source: str, expected: bool) -> None:
    policies = [entry(L, "orders", ALLOW, ips=("10.0.0.0/24", "fd00::/8"))]
    assert allowed(policies, source=source) is expected


def test_a_deny_from_one_network_and_allow_elsewhere() -> None:
    policies = [entry(L, "orders", DENY, ips=("10.0.0.0/24",)), entry(L, "orders", ALLOW)]
    assert not allowed(policies, source="ipv4:10.0.0.5:1") and allowed(policies, source="ipv4:192.168.1.1:1")


def test_a_super_user_bypasses_policies_and_every_resource_is_checked() -> None:
    assert allowed([], user=USERS["root"])
    authorizer = Authorizer(
        {
            "alice": Acl(
                "alice",
                (
                    entry(L, "orders", ALLOW, actions=(Action.SUB,)),
                    entry(L, "g1", ALLOW, actions=(Action.SUB,), kind=ResourceType.GROUP),
                ),
            )
        }
    )
    authorizer.check(ALICE, [(ResourceType.TOPIC, "orders"), (ResourceType.GROUP, "g1")], Action.SUB, "ipv4:1.2.3.4:5")
    with pytest.raises(AccessDenied, match="Group 'g2'"):
        authorizer.check(
            ALICE, [(ResourceType.TOPIC, "orders"), (ResourceType.GROUP, "g2")], Action.SUB, "ipv4:1.2.3.4:5"
        )


@pytest.mark.parametrize(
    "resource, name, kind, expected",
    [
        ("Topic:orders", "orders", ResourceType.TOPIC, True),
        ("Topic:orders", "orders", ResourceType.GROUP, False),
        ("Topic:ord*", "orders", ResourceType.TOPIC, True),
        ("Topic:ord*", "payments", ResourceType.TOPIC, False),
        ("Topic:*", "anything", ResourceType.TOPIC, True),
        ("Topic:*", "g1", ResourceType.GROUP, False),
        ("Group:*", "g1", ResourceType.GROUP, True),
        ("*", "anything", ResourceType.GROUP, True),
    ],
)
def test_stored_resources(resource: str, name: str, kind: ResourceType, expected: bool) -> None:
    from services.broker.auth import policy_entry

    assert allowed([policy_entry(resource, ["Pub"], "Allow")], name=name, kind=kind) is expected


def test_one_of_several_actions_is_enough() -> None:
    authorizer = Authorizer({"alice": Acl("alice", (entry(L, "orders", ALLOW, actions=(Action.SUB,)),))})
    authorizer.check(ALICE, [(ResourceType.TOPIC, "orders")], (Action.PUB, Action.SUB), "ipv4:1.2.3.4:5")
    with pytest.raises(AccessDenied, match="Pub/Sub"):
        authorizer.check(ALICE, [(ResourceType.TOPIC, "other")], (Action.PUB, Action.SUB), "ipv4:1.2.3.4:5")
