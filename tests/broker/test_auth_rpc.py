"""Authentication, authorization and TLS end to end: a broker with both on, users and ACLs made
with ``pyrmq acl``, the official Python client signing with its credentials, raw v2 calls with
forged headers, and the client port over TLS."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.auth import sign
from services.broker.v2.server import BrokerServer
from services.launcher.cli import main as pyrmq
from services.v2client.client import Credentials, open_channel
from tests.support.official_client import run_client

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")


@pytest.fixture
def secured(make_broker: Callable[..., BrokerServer]) -> BrokerServer:
    return make_broker(
        authentication_enabled=True,
        authorization_enabled=True,
        init_authentication_user=":".join(ROOT),
        auth_cache_ttl_ms=60_000,
    )


def cli(
    endpoint: str,
    user: tuple[str, str] | None,
    *args: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    secret: str | None = None,
) -> tuple[int, str, str]:
    if secret is not None:
        monkeypatch.setenv("PYRMQ_NEW_SECRET_KEY", secret)
    creds = ["--access-key", user[0], "--secret-key", user[1]] if user else []
    code = pyrmq([*args, "--endpoint", endpoint, *creds])
    out, err = capsys.readouterr()
    return code, out, err


def test_users_acls_and_the_official_client(secured: BrokerServer, tmp_path: Path, monkeypatch, capsys) -> None:
    endpoint = f"127.0.0.1:{secured.port}"

    def run(user, *args, secret=None):
        return cli(
            endpoint,
            user,
            *args,
            monkeypatch=monkeypatch,
            capsys=capsys,
            secret=secret,
        )

    assert run(ROOT, "topic", "create", "orders", "--type", "NORMAL")[0] == 0  # a Super user creates topics
    assert run(ROOT, "topic", "create", "events", "--type", "NORMAL")[0] == 0
    assert run(ROOT, "acl", "user", "create", "alice", secret=ALICE[1])[0] == 0
    assert run(ROOT, "acl", "policy", "add", "alice", "Topic:orders", "--actions", "pub")[0] == 0
    assert run(ROOT, "acl", "policy", "add", "alice", "Topic:events", "--actions", "Sub")[0] == 0
    assert run(ROOT, "acl", "policy", "add", "alice", "Group:billing", "--actions", "Sub")[0] == 0
    code, out, _ = run(ROOT, "acl", "list", "alice", "--json")
    assert code == 0 and [p["resource"] for p in json.loads(out)["acls"][0]["policies"]] == [
        "Topic:orders",
        "Topic:events",
        "Group:billing",
    ]
    code, out, _ = run(ROOT, "acl", "user", "list", "--json")
    assert json.loads(out)["users"] == [
        {"username": "alice", "user_type": "Normal", "user_status": "enable"},
        {"username": "root", "user_type": "Super", "user_status": "enable"},
    ]
    assert "secret" not in out

    # The official client signs with alice's keys: Pub on orders is allowed, on events it is not.
    results, _ = run_client(
        tmp_path, endpoint, [{"topic": "orders", "body": "ok"}], ("orders",), ak=ALICE[0], sk=ALICE[1]
    )
    assert results[0]["ok"], results
    results, _ = run_client(
        tmp_path, endpoint, [{"topic": "events", "body": "no"}], ("orders",), ak=ALICE[0], sk=ALICE[1]
    )
    assert not results[0]["ok"] and results[0]["code"] == d.FORBIDDEN, results
    # A wrong secret: the client's route lookup gets UNAUTHORIZED, which it reports as no route.
    results, _ = run_client(
        tmp_path, endpoint, [{"topic": "orders", "body": "no"}], ("orders",), ak=ALICE[0], sk="wrong"
    )
    assert not results[0]["ok"] and "route" in results[0]["message"], results

    # pyrmq send / consume as users: root may send anywhere; alice consumes events as billing.
    assert run(ROOT, "send", "events", "for billing")[0] == 0
    code, out, _ = run(ALICE, "consume", "events", "--group", "billing", "--max", "1", "--json")
    assert code == 0 and [m["body_text"] for m in json.loads(out)["messages"]] == ["for billing"]
    assert run(ALICE, "consume", "events", "--group", "other", "--max", "1")[0] == 5  # FORBIDDEN
    assert run(None, "send", "orders", "anonymous")[0] == 5  # UNAUTHORIZED
    # Admin is for Super users.
    code, _, err = run(ALICE, "topic", "list")
    assert code == 5 and "Super" in err
    assert run(None, "topic", "list")[0] == 5
    # Revoking applies at once on this broker (its cache is invalidated by the change).
    assert run(ROOT, "acl", "policy", "remove", "alice", "Topic:orders")[0] == 0
    assert run(ALICE, "send", "orders", "revoked")[0] == 5
    assert run(ROOT, "acl", "user", "delete", "alice")[0] == 0
    assert run(ROOT, "acl", "user", "delete", "alice")[0] == 3
    assert run(ROOT, "acl", "policy", "add", "ghost", "Topic:x", "--actions", "Pub")[0] == 3
    assert run(ROOT, "acl", "user", "create", "bad name", secret="x")[0] == 2


def test_forged_server_headers_change_nothing(secured: BrokerServer, monkeypatch, capsys) -> None:
    endpoint = f"127.0.0.1:{secured.port}"
    cli(endpoint, ROOT, "acl", "user", "create", "alice", secret=ALICE[1], monkeypatch=monkeypatch, capsys=capsys)
    date = "20261122T093015Z"
    headers = [
        ("x-mq-client-id", "forger"),
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature={sign(ALICE[1], date)}",
        ),
        ("x-mq-authorization-ak", "root"),
        ("rpc-remote-address", "127.0.0.1:1"),
        ("x-mq-channel-id", "c"),
    ]
    with grpc.insecure_channel(endpoint) as channel:
        response = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="orders")), metadata=headers, timeout=10
        )
    assert response.status.code == d.FORBIDDEN  # alice has no ACL; claiming to be root does not help


def test_authorization_needs_authentication(make_broker: Callable[..., BrokerServer]) -> None:
    with pytest.raises(ValueError, match="needs authentication_enabled"):
        make_broker(authorization_enabled=True)


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_the_client_port_over_tls(
    make_broker: Callable[..., BrokerServer], topics: Callable[..., None], tmp_path: Path, monkeypatch, capsys
) -> None:
    topics("TlsTopic")
    cert, key = self_signed(tmp_path)
    broker = make_broker(tls_mode="tls", tls_cert_path=str(cert), tls_key_path=str(key))
    endpoint = f"127.0.0.1:{broker.port}"
    with open_channel(endpoint, Credentials(), tls=True, ca_file=str(cert)) as channel:
        response = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="TlsTopic")), metadata=[("x-mq-client-id", "tls")], timeout=10
        )
    assert response.status.code == d.OK
    assert pyrmq(["send", "TlsTopic", "over tls", "--endpoint", endpoint, "--tls", "--ca-file", str(cert)]) == 0
    capsys.readouterr()
    with grpc.insecure_channel(endpoint) as channel:  # plaintext is refused
        with pytest.raises(grpc.RpcError) as info:
            s_grpc.MessagingServiceStub(channel).QueryRoute(
                s.QueryRouteRequest(topic=d.Resource(name="TlsTopic")), metadata=[("x-mq-client-id", "x")], timeout=5
            )
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
