"""Run every corpus case (tests/badinput/corpus.py) against one real store + broker.

Each case asserts: the exact answer (a v2 code in band, or a gRPC status code), never
INTERNAL_SERVER_ERROR, and that nothing it names in ``unchanged`` moved (appended records,
topics, groups, committed offsets). A remoting case (the door's RocketMQ protocol) also asserts
its remark says what was wrong (``Case.remark``; never a Python exception's name) and that the
same connection answers the next request. Then: raw truncated/garbage protobuf bytes on every
method get a clean gRPC error and the servers keep serving; and the seed message the forged
handles aimed at is still held by its consumer (its real handle still acks).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.admin.v1 import admin_pb2 as apb
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from tests.badinput.corpus import CASES, Case, InBand
from tests.badinput.corpus_remoting import HEADERS, REMOTING_GROUP, SUB_VERSION
from tests.badinput.remoting_wire import FrameSocket
from tests.support.badinput_cluster import Cluster
from tests.support.v2_requests import METADATA

V2_SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]
ADMIN_SERVICE = apb.DESCRIPTOR.services_by_name["Admin"]
STORE_SERVICE = pb.DESCRIPTOR.services_by_name["Store"]


def stub_of(cluster: Cluster, service: str):
    return {"v2": cluster.v2, "admin": cluster.admin, "store": cluster.store_stub}[service]


def run_case(cluster: Cluster, case: Case):
    """The answer: an int (v2 in-band code), a grpc.StatusCode, or InBand(store result status)."""
    request = case.build(cluster.ctx)
    metadata = case.metadata if case.metadata is not None else (METADATA if case.service == "v2" else ())
    call = getattr(stub_of(cluster, case.service), case.rpc)
    try:
        if case.kind == "server_stream":
            replies = list(call(request, metadata=metadata, timeout=case.timeout_s))
            statuses = [r.status for r in replies if r.HasField("status")]
            assert len(statuses) == 1, replies  # exactly one status element, and the stream ended
            if case.rpc == "ReceiveMessage":
                assert replies[-1].HasField("delivery_timestamp") and not any(r.HasField("message") for r in replies)
            return statuses[0].code
        if case.kind == "bidi_stream":
            replies = list(call(iter(request), metadata=metadata, timeout=case.timeout_s))
            assert replies, "a refused Telemetry stream answers a status or a gRPC error"
            return replies[0].status.code
        response = call(request, metadata=metadata, timeout=case.timeout_s)
    except grpc.RpcError as exc:
        return exc.code()
    if case.service == "v2":
        return response.status.code
    if isinstance(case.expected, InBand):
        if hasattr(response, "results"):
            return InBand(response.results[-1].status)
        return InBand(response.status)
    return grpc.StatusCode.OK


def _marks(case: Case):
    return [pytest.mark.xfail(strict=True, reason=case.bug)] if case.bug else []


class RemotingSession:
    """The connection the remoting cases share, with ``REMOTING_GROUP`` registered by a heartbeat
    on it (subscribed to TopicTest at ``SUB_VERSION``), renewed well within the door's 120 s."""

    HEARTBEAT = json.dumps({
        "clientID": "badinput@1",
        "consumerDataSet": [{
            "groupName": REMOTING_GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": "TopicTest", "subString": "*", "expressionType": "TAG",
                                     "subVersion": SUB_VERSION, "tagsSet": [], "codeSet": []}],
        }],
        "producerDataSet": [],
    }).encode()  # fmt: skip

    def __init__(self, address: str) -> None:
        self._address = address
        self.conn = FrameSocket(address)
        self._heartbeat_s = 0.0

    def ready(self) -> FrameSocket:
        if self.conn.closed:
            self.conn.close()
            self.conn = FrameSocket(self._address)
            self._heartbeat_s = 0.0
        if time.monotonic() - self._heartbeat_s > 30:
            answer = self.conn.call(RemotingCommand(RequestCode.HEART_BEAT, body=self.HEARTBEAT))
            assert answer is not None and answer.code == ResponseCode.SUCCESS, answer
            self._heartbeat_s = time.monotonic()
        return self.conn


@pytest.fixture(scope="module")
def remoting_session(cluster: Cluster) -> Iterator[RemotingSession]:
    session = RemotingSession(cluster.remoting_address)
    try:
        yield session
    finally:
        session.conn.close()


PYTHON_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception): ")


def run_remoting(session: RemotingSession, case: Case) -> tuple[int, str]:
    """The answer's code and remark; the connection must answer the next request after it."""
    conn = session.ready()
    answer = conn.call(case.build({}), case.timeout_s)
    assert answer is not None, f"{case.id}: the door closed the connection"
    assert conn.probe() == ResponseCode.SUCCESS, f"{case.id}: the connection stopped serving"
    return answer.code, answer.remark or ""


def _remoting_name(code: int) -> str:
    try:
        return f"{ResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)


def check_remoting(cluster: Cluster, session: RemotingSession, case: Case) -> None:
    session.ready()
    before = cluster.snapshot()
    code, remark = run_remoting(session, case)
    after = cluster.snapshot()
    got, expected = _remoting_name(code), _remoting_name(case.expected)
    assert code == case.expected, f"{case.id}: got {got} {remark!r}, expected {expected}"
    assert remark, f"{case.id}: a refusal without a remark"
    assert not PYTHON_EXCEPTION.search(remark), f"{case.id}: the remark names a Python exception: {remark!r}"
    assert case.remark is None or case.remark in remark, f"{case.id}: remark {remark!r} lacks {case.remark!r}"
    for part in case.unchanged:
        assert after[part] == before[part], f"{case.id} changed {part}: {before[part]} -> {after[part]}"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CASES])
def test_bad_request(cluster: Cluster, case: Case, request: pytest.FixtureRequest) -> None:
    if case.service == "remoting":
        check_remoting(cluster, request.getfixturevalue("remoting_session"), case)
        return
    before = cluster.snapshot()
    got = run_case(cluster, case)
    after = cluster.snapshot()
    assert got != d.INTERNAL_SERVER_ERROR and got != grpc.StatusCode.UNKNOWN, got
    assert got == case.expected, f"{case.id}: got {_name(got)}, expected {_name(case.expected)}"
    for part in case.unchanged:
        assert after[part] == before[part], f"{case.id} changed {part}: {before[part]} -> {after[part]}"


def _name(code) -> str:
    if isinstance(code, int) and not isinstance(code, bool):
        try:
            return f"{d.Code.Name(code)} ({code})"
        except ValueError:
            return str(code)
    return str(code)


def test_the_corpus_is_big_and_covers_every_rpc() -> None:
    assert len(CASES) >= 300
    covered = {(c.service, c.rpc) for c in CASES}
    for method in V2_SERVICE.methods:
        assert ("v2", method.name) in covered, method.name


def test_the_remoting_corpus_knows_every_code_the_door_serves(cluster: Cluster) -> None:
    """corpus_remoting.HEADERS (a required field missing, a number that is not) covers every
    registered code: a code added to the door without its header here fails."""
    assert sorted(cluster.remoting.dispatcher.codes - set(HEADERS)) == []
    assert sorted(set(HEADERS) - cluster.remoting.dispatcher.codes) == []


# -- raw bytes: truncated and garbage protobuf ------------------------------------------------------


def _valid_bytes() -> dict[str, bytes]:
    """A valid serialized request per v2 method (to truncate)."""
    from tests.support.v2_requests import message

    return {
        "SendMessage": s.SendMessageRequest(messages=[message(tag="TagA", keys=["k"])]).SerializeToString(),
        "QueryRoute": s.QueryRouteRequest(topic=d.Resource(name="TopicTest")).SerializeToString(),
        "AckMessage": s.AckMessageRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name="TopicTest"),
            entries=[s.AckMessageEntry(message_id="m", receipt_handle="h")],
        ).SerializeToString(),
    }


GARBAGE = {
    "0xff x 64": b"\xff" * 64,
    "bad wire type 7": b"\x0f\x01",
    "length beyond end": b"\x0a\xff\xff\xff\xff\x0f" + b"a",
    "varint 11 bytes": b"\x08" + b"\xff" * 11,
    "field number 0": b"\x00\x01",
    "group start without end": b"\x0b",
    "random 1 KiB": random.Random(7).randbytes(1024),
    "nested depth 200": b"\x0a\x02" * 200,
    "invalid UTF-8 in string field": b"\x0a\x04\x0a\x02\xff\xfe",
}
# Bytes that do not parse are refused by services.runtime.rpc.decode_guard, never by grpcio itself (whose own
# refusal, INTERNAL "Exception deserializing request!", leaks the HTTP/2 stream).
ERROR_CODES = {grpc.StatusCode.INVALID_ARGUMENT}


def _raw(channel: grpc.Channel, path: str, payload: bytes, metadata=METADATA):
    call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    return call(payload, metadata=metadata, timeout=10)


@pytest.mark.parametrize("label", sorted(GARBAGE))
def test_garbage_bytes_on_every_unary_method(cluster: Cluster, label: str) -> None:
    before = cluster.snapshot()
    payload = GARBAGE[label]
    for service, channel in (
        (V2_SERVICE, cluster.broker_channel),
        (ADMIN_SERVICE, cluster.broker_channel),
        (STORE_SERVICE, cluster.store_channel),
    ):
        for method in service.methods:
            if method.client_streaming or method.server_streaming:
                continue
            path = f"/{service.full_name}/{method.name}"
            try:
                reply = _raw(channel, path, payload)
            except grpc.RpcError as exc:
                # An undecodable request is INVALID_ARGUMENT; bytes that happen to parse (proto3 is
                # lenient) get the RPC's own refusal, never a bug.
                assert exc.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (path, exc.details())
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in (exc.details() or ""):
                    assert method.input_type.full_name in exc.details(), (path, exc.details())
                continue
            # Some bytes happen to parse (proto3 is lenient): then the answer must be a clean refusal.
            if service is V2_SERVICE:
                response = getattr(s, method.output_type.name).FromString(reply)
                assert response.status.code not in (0, d.INTERNAL_SERVER_ERROR), (path, response.status)
    assert cluster.snapshot() == before
    assert cluster.healthy()


@pytest.mark.parametrize("rpc", sorted(_valid_bytes()))
def test_truncated_requests(cluster: Cluster, rpc: str) -> None:
    before = cluster.snapshot()
    data = _valid_bytes()[rpc]
    path = f"/{V2_SERVICE.full_name}/{rpc}"
    for cut in range(1, len(data)):
        try:
            reply = _raw(cluster.broker_channel, path, data[:cut])
        except grpc.RpcError as exc:
            assert exc.code() in ERROR_CODES, (cut, exc.code())
            continue
        response = getattr(s, V2_SERVICE.methods_by_name[rpc].output_type.name).FromString(reply)
        assert response.status.code != d.INTERNAL_SERVER_ERROR, (cut, response.status)
        if rpc == "SendMessage" and response.status.code == d.OK:
            before = cluster.snapshot()  # a cut that still parses as a valid message may be stored
    assert cluster.snapshot()["topics"] == before["topics"]
    assert cluster.healthy()


def test_garbage_on_streaming_methods(cluster: Cluster) -> None:
    for name in ("ReceiveMessage", "PullMessage"):
        call = cluster.broker_channel.unary_stream(
            f"/{V2_SERVICE.full_name}/{name}", request_serializer=None, response_deserializer=None
        )
        for payload in GARBAGE.values():
            with pytest.raises(grpc.RpcError) as caught:
                list(call(payload, metadata=METADATA, timeout=10))
            assert caught.value.code() in ERROR_CODES
    telemetry = cluster.broker_channel.stream_stream(
        f"/{V2_SERVICE.full_name}/Telemetry", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(telemetry(iter([b"\xff" * 16]), metadata=METADATA, timeout=10))
    assert caught.value.code() in ERROR_CODES | {grpc.StatusCode.CANCELLED}
    assert cluster.healthy()


def test_many_undecodable_requests_do_not_use_up_the_connection(cluster: Cluster) -> None:
    """More bad requests on one connection than it may have streams open (128): each one's stream
    is released, so calls after them still go through."""
    path = f"/{V2_SERVICE.full_name}/SendMessage"
    for _ in range(300):
        with pytest.raises(grpc.RpcError) as caught:
            _raw(cluster.broker_channel, path, GARBAGE["invalid UTF-8 in string field"])
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert cluster.healthy()


def test_oversized_grpc_message_is_resource_exhausted(cluster: Cluster) -> None:
    """Beyond the broker's gRPC receive limit: a transport refusal, then business as usual."""
    with pytest.raises(grpc.RpcError) as caught:
        _raw(cluster.broker_channel, f"/{V2_SERVICE.full_name}/SendMessage", b"\x0a" + b"\xff" * (200 << 20))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert cluster.healthy()


def test_zz_the_seed_message_survived_every_forged_handle(cluster: Cluster) -> None:
    """Runs last (file order): the handles the corpus forged from G2's real one touched nothing."""
    ack = cluster.v2.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name="G2"),
            topic=d.Resource(name="OtherTopic"),
            entries=[s.AckMessageEntry(message_id="SEED-1", receipt_handle=cluster.ctx["handle"])],
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert ack.status.code == d.OK, ack.status
    assert cluster.healthy()
