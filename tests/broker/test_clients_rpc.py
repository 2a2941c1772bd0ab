"""Connected clients over the wire: raw v2 Telemetry clients against a real broker (through its
HAProxy front) and store; ``pyrmq client list|stack`` and ``pyrmq message verify`` as
subprocesses against it. The raw clients answer PrintThreadStackTraceCommand and
VerifyMessageCommand as the Java client does (the official Python client answers neither:
test_official_clients_admin.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from tests.support.cli import pyrmq
from tests.support.v2_requests import Stream, message, producer_settings, push_consumer_settings, send_ok
from tests.support.waits import wait_until

Answer = Callable[[s.TelemetryCommand], s.TelemetryCommand | None]


@pytest.fixture
def admin(broker) -> Iterator[pb_grpc.AdminStub]:
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield pb_grpc.AdminStub(channel)


def connect(v2, client_id: str, settings: s.TelemetryCommand, answer: Answer | None = None, **headers: str) -> Stream:
    """A raw client: its Telemetry stream, Settings sent and applied; ``answer`` replies to the
    server's later commands (None: it ignores them, as the Python client does)."""
    metadata = (("x-mq-client-id", client_id), *((k.replace("_", "-"), v) for k, v in headers.items()))
    stream = Stream(v2, metadata=metadata)
    assert stream.send(settings).status.code == d.OK

    def serve() -> None:
        for command in iter(stream.replies.get, None):
            reply = answer(command) if answer is not None and isinstance(command, s.TelemetryCommand) else None
            if reply is not None:
                stream.outbound.put(reply)

    threading.Thread(target=serve, daemon=True).start()
    return stream


def java_like(command: s.TelemetryCommand) -> s.TelemetryCommand | None:
    if command.HasField("print_thread_stack_trace_command"):
        nonce = command.print_thread_stack_trace_command.nonce
        return s.TelemetryCommand(
            status=d.Status(code=d.OK, message="OK"),
            thread_stack_trace=s.ThreadStackTrace(nonce=nonce, thread_stack_trace='"main" RUNNABLE\n  at Main.run'),
        )
    if command.HasField("verify_message_command"):
        verify = command.verify_message_command
        ok = verify.message.body == b"consume me"
        return s.TelemetryCommand(
            status=d.Status(code=d.OK if ok else d.FAILED_TO_CONSUME_MESSAGE, message="listener said so"),
            verify_message_result=s.VerifyMessageResult(nonce=verify.nonce),
        )
    return None


def test_list_clients_from_settings_headers_and_heartbeats(broker, v2, admin):
    producer = connect(
        v2, "java-producer", producer_settings("T1", "T2"), x_mq_language="JAVA", x_mq_client_version="5.0.7"
    )
    consumer = connect(v2, "py-consumer", push_consumer_settings("G1", "T1"))  # no headers: the UserAgent's
    first = {c.client_id: c for c in admin.ListClients(pb.ListClientsRequest(), timeout=10).clients}
    heartbeat = v2.Heartbeat(
        s.HeartbeatRequest(client_type=d.PUSH_CONSUMER, group=d.Resource(name="G1")),
        metadata=(("x-mq-client-id", "py-consumer"),),
        timeout=10,
    )
    assert heartbeat.status.code == d.OK
    clients = admin.ListClients(pb.ListClientsRequest(), timeout=10).clients
    assert [c.client_id for c in clients] == ["java-producer", "py-consumer"]
    java, python = clients
    assert (java.client_type, java.group, list(java.topics)) == ("PRODUCER", "", ["T1", "T2"])
    assert (java.language, java.version) == ("JAVA", "5.0.7")  # the headers win over the UserAgent
    assert (python.client_type, python.group, list(python.topics), list(python.expressions)) == (
        "PUSH_CONSUMER",
        "G1",
        ["T1"],
        ["*"],
    )
    assert (python.language, python.version) == ("PYTHON", "5.1.2")
    # Through the HAProxy front, the client's own address (not the front's loopback hop).
    assert all(c.address.startswith("127.0.0.1:") and c.address != f"127.0.0.1:{broker.port}" for c in clients)
    assert python.last_heartbeat_timestamp_ms >= first["py-consumer"].last_heartbeat_timestamp_ms
    assert python.connected_timestamp_ms <= python.last_heartbeat_timestamp_ms

    assert [c.client_id for c in admin.ListClients(pb.ListClientsRequest(group="G1"), timeout=10).clients] == [
        "py-consumer"
    ]
    listed = json.loads(pyrmq("client", "list", "--endpoint", f"127.0.0.1:{broker.port}", "--json").stdout)
    assert [(c["client_id"], c["language"], c["version"]) for c in listed["clients"]] == [
        ("java-producer", "JAVA", "5.0.7"),
        ("py-consumer", "PYTHON", "5.1.2"),
    ]
    table = pyrmq("client", "list", "--endpoint", f"127.0.0.1:{broker.port}", "--group", "G1")
    assert table.returncode == 0 and "py-consumer" in table.stdout and "T1(*)" in table.stdout
    assert "java-producer" not in table.stdout

    consumer.call.cancel()  # the client goes away: its session ends with the stream
    producer.call.cancel()
    wait_until(lambda: not admin.ListClients(pb.ListClientsRequest(), timeout=10).clients, 10, "no client listed")


def test_stack_answered_on_the_stream_and_a_silent_client_times_out(broker, v2, admin):
    connect(v2, "java-1", producer_settings("T"), answer=java_like)
    connect(v2, "silent-1", producer_settings("T"))
    response = admin.PrintClientStack(pb.PrintClientStackRequest(client_id="java-1", timeout_ms=5_000), timeout=10)
    assert (response.answer.client_id, response.answer.code) == ("java-1", "OK")
    assert response.thread_stack_trace == '"main" RUNNABLE\n  at Main.run'

    with pytest.raises(grpc.RpcError) as caught:
        admin.PrintClientStack(pb.PrintClientStackRequest(client_id="silent-1", timeout_ms=300), timeout=10)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "silent-1 (PYTHON) did not answer PrintThreadStackTraceCommand within 0.3 s" in caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:
        admin.PrintClientStack(pb.PrintClientStackRequest(client_id="gone", timeout_ms=300), timeout=10)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND

    endpoint = ("--endpoint", f"127.0.0.1:{broker.port}")
    printed = pyrmq("client", "stack", "java-1", *endpoint)
    assert printed.returncode == 0 and '"main" RUNNABLE' in printed.stdout, printed.stderr
    silent = pyrmq("client", "stack", "silent-1", "--timeout", "0.5", *endpoint)
    assert silent.returncode == 4 and "did not answer PrintThreadStackTraceCommand within 0.5 s" in silent.stderr
    assert pyrmq("client", "stack", "gone", "--timeout", "0.5", *endpoint).returncode == 3


def test_verify_sends_the_stored_message_to_a_consumer_of_the_group(broker, v2, admin):
    admin.CreateTopic(pb.CreateTopicRequest(name="VerifyTopic", message_type=pb.NORMAL), timeout=10)
    send_ok(v2, message("VerifyTopic", body=b"consume me", message_id="VERIFY-1"))
    send_ok(v2, message("VerifyTopic", body=b"poison", message_id="VERIFY-2"))
    connect(v2, "push-1", push_consumer_settings("VerifyGroup", "VerifyTopic"), answer=java_like)
    request = pb.VerifyMessageRequest(group="VerifyGroup", message_id="VERIFY-1", topic="VerifyTopic", timeout_ms=5000)
    response = admin.VerifyMessage(request, timeout=10)
    assert (response.answer.client_id, response.answer.code) == ("push-1", "OK")
    assert (response.topic, response.message_id) == ("VerifyTopic", "VERIFY-1") and response.offset_msg_id

    endpoint = ("--endpoint", f"127.0.0.1:{broker.port}")
    failed = pyrmq("message", "verify", "--group", "VerifyGroup", "--id", "VERIFY-2", "--json", *endpoint)
    assert failed.returncode == 1, failed.stderr  # answered, but not OK
    assert json.loads(failed.stdout)["code"] == "FAILED_TO_CONSUME_MESSAGE"
    nobody = pyrmq("message", "verify", "--group", "NoSuchGroup", "--id", "VERIFY-1", "--timeout", "1", *endpoint)
    assert nobody.returncode == 3 and "no consumer of group NoSuchGroup" in nobody.stderr
