"""The remoting door's ACL: AclClientRPCHook signatures checked against ACL 2.0 users and
policies (the same store objects as the v2 door's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from services.broker.remoting.door import RemotingDoor, build_remoting
from services.broker.v2.server import BrokerServer
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.signature import combine_request_content, sign
from services.store.client.model import PolicyView
from tests.support.remoting_client import RemotingTestClient


@pytest.fixture
def secured(make_broker: Callable[..., BrokerServer]) -> Iterator[RemotingDoor]:
    broker = make_broker(
        authentication_enabled=True, authorization_enabled=True, init_authentication_user="root:rootsecret"
    )
    store = broker.core.store
    store.put_user("alice", "alicesecret", "Normal", "enable")
    store.put_acl("alice", [PolicyView("Topic:AclT", ("Pub",), "Allow", ())])
    door = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False)
    door.start()
    try:
        yield door
    finally:
        door.stop()


def signed(fields: dict[str, str], body: bytes, access_key: str, secret: str) -> dict[str, str]:
    fields = {**fields, "AccessKey": access_key}
    return {**fields, "Signature": sign(secret, combine_request_content(fields, body, False))}


def route(topic: str) -> dict[str, str]:
    return {"topic": topic}


def test_signed_requests_pass_and_unsigned_or_forged_ones_get_16(
    secured: RemotingDoor, topics: Callable[..., None]
) -> None:
    topics("AclT", "OtherT", queue_nums=1)
    with RemotingTestClient(secured.context.address) as client:
        anonymous = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route("AclT"))
        assert anonymous.code == ResponseCode.NO_PERMISSION and "AccessKey" in (anonymous.remark or "")
        empty_key = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {**route("AclT"), "AccessKey": ""})
        assert empty_key.code == ResponseCode.NO_PERMISSION  # the C++ client's form without credentials
        ok = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed(route("AclT"), b"", "alice", "alicesecret"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        forged = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed(route("AclT"), b"", "alice", "guess"))
        assert forged.code == ResponseCode.NO_PERMISSION and "signature" in (forged.remark or "")
        denied = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed(route("OtherT"), b"", "alice", "alicesecret"))
        assert denied.code == ResponseCode.NO_PERMISSION and "OtherT" in (denied.remark or "")
        root = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed(route("OtherT"), b"", "root", "rootsecret"))
        assert root.code == ResponseCode.SUCCESS


def test_the_body_is_signed_too(secured: RemotingDoor, topics: Callable[..., None]) -> None:
    topics("AclT", queue_nums=1)
    with RemotingTestClient(secured.context.address) as client:
        fields = {"a": "PG", "b": "AclT", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
        good = client.call(RequestCode.SEND_MESSAGE_V2, signed(fields, b"body", "alice", "alicesecret"), b"body")
        assert good.code == ResponseCode.SUCCESS, good.remark
        tampered = client.call(RequestCode.SEND_MESSAGE_V2, signed(fields, b"body", "alice", "alicesecret"), b"b0dy")
        assert tampered.code == ResponseCode.NO_PERMISSION
