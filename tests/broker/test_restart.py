"""Restarts with consumers: nothing sent is lost and a group's progress is kept.

* The broker keeps no state (every offset, receipt and retry count lives in the store): a
  message received through one broker is acked through a freshly started one.
* ``pyrmq up`` stopped and started on the same data: acked messages stay consumed and the
  rest arrive; after a kill -9 of the whole cluster nothing is lost (at least once: messages
  acked just before the kill may come again).

Sends and the final consumes use the official Python client (subprocesses); partial consumption
uses raw v2 ReceiveMessage with a small batch so the test controls what is acked.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from tests.support.official_client import consume, produce
from tests.support.processes import UP_READY, Process, pyrmq_up_command
from tests.support.topics import create_topics_at
from tests.support.v2_requests import ack, receive

pytestmark = pytest.mark.needs("rocketmq-python-client")

BODIES = [f"restart-{i}" for i in range(10)]


def stub(endpoint: str) -> Iterator[s_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(endpoint) as channel:
        yield s_grpc.MessagingServiceStub(channel)


def take(endpoint: str, topic: str, group: str, count: int, invisible_s: int = 30) -> list[d.Message]:
    """Receive exactly ``count`` messages over raw v2 (not acked)."""
    got: list[d.Message] = []
    for v2 in stub(endpoint):
        while len(got) < count:
            status, messages, _ = receive(
                v2, topic, group=group, batch_size=count - len(got), invisible_s=invisible_s, polling_s=2
            )
            assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
            got += messages
    return got


def ack_all(endpoint: str, topic: str, group: str, messages: list[d.Message]) -> None:
    for v2 in stub(endpoint):
        for m in messages:
            assert ack(v2, topic, m.system_properties.receipt_handle, group=group).status.code == d.OK


def nothing_left(endpoint: str, topic: str, group: str) -> bool:
    for v2 in stub(endpoint):
        status, messages, _ = receive(v2, topic, group=group, polling_s=1)
        return status.code == d.MESSAGE_NOT_FOUND and not messages
    return False


# Long polls as short as 1 s (the broker's minimum is 5 s): an empty receive, such as
# nothing_left's, answers after the 1 s it asks for.
SHORT_POLLS_MS = 1_000
# In-flight receipts of the restarted cluster: still invisible while it stops and starts again.
IN_FLIGHT_INVISIBLE_S = 5


def test_broker_restart_keeps_receipts_and_progress(make_broker, topics, tmp_path):
    topics("RsTopic")
    first = make_broker(long_polling_timeout_ms_min=SHORT_POLLS_MS)
    endpoint = f"127.0.0.1:{first.port}"
    produce(tmp_path, endpoint, "RsTopic", [{"body": body} for body in BODIES])
    acked = take(endpoint, "RsTopic", "RsGroup", 4)
    ack_all(endpoint, "RsTopic", "RsGroup", acked)
    in_flight = take(endpoint, "RsTopic", "RsGroup", 3)
    first.stop(1.0)

    second = make_broker(long_polling_timeout_ms_min=SHORT_POLLS_MS)  # another process would: it only knows the store
    endpoint = f"127.0.0.1:{second.port}"
    ack_all(endpoint, "RsTopic", "RsGroup", in_flight)  # receipts from the first broker still work
    rest = consume(tmp_path, endpoint, group="RsGroup", topic="RsTopic", count=3, deadline_s=30, await_s=2)
    seen = [m.body.decode() for m in acked + in_flight] + [r["body"] for r in rest]
    assert sorted(seen) == sorted(BODIES)  # each exactly once
    assert all(r["acked"] and r["attempt"] == 1 for r in rest), rest
    assert nothing_left(endpoint, "RsTopic", "RsGroup")


def start_up(tmp_path: Path, processes: list[Process]) -> tuple[Process, str]:
    up = Process(
        pyrmq_up_command(tmp_path / "data"),
        tmp_path,
        {
            "PYRMQ_BROKER_LONG_POLLING_TIMEOUT_MS_MIN": str(SHORT_POLLS_MS),
            "PYRMQ_BROKER_INVISIBLE_DURATION_MS_MIN": str(IN_FLIGHT_INVISIBLE_S * 1000),
        },
    )
    processes.append(up)
    return up, up.wait_line(UP_READY)["clients"]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_cluster_restart_keeps_messages_and_consumer_progress(tmp_path: Path, processes: list[Process], stop):
    up, endpoint = start_up(tmp_path, processes)
    create_topics_at(endpoint, "UpRestart")
    produce(tmp_path, endpoint, "UpRestart", [{"body": body} for body in BODIES])
    acked = take(endpoint, "UpRestart", "UpGroup", 4)
    ack_all(endpoint, "UpRestart", "UpGroup", acked)
    # Never acked: must come back, once invisible no more (not the 30 s a consumer would take).
    in_flight = take(endpoint, "UpRestart", "UpGroup", 2, invisible_s=IN_FLIGHT_INVISIBLE_S)
    if stop == signal.SIGKILL:
        up.popen.kill()  # pyrmq up's children die with it (PR_SET_PDEATHSIG)
        up.popen.wait(60)
    else:
        assert up.stop(stop) == 0, up.log()

    up, endpoint = start_up(tmp_path, processes)
    acked_bodies = {m.body.decode() for m in acked}
    expected = set(BODIES) - acked_bodies
    rest = consume(
        tmp_path, endpoint, group="UpGroup", topic="UpRestart", count=len(expected), deadline_s=30, await_s=2
    )
    delivered = {r["body"] for r in rest}
    assert expected <= delivered, (expected - delivered, rest)  # nothing lost, in flight included
    assert {m.body.decode() for m in in_flight} <= delivered
    if stop == signal.SIGTERM:  # a clean stop persisted the group's offsets: acked ones stay consumed
        assert delivered == expected, rest
        assert nothing_left(endpoint, "UpRestart", "UpGroup")
    assert up.stop(signal.SIGTERM) == 0, up.log()


def test_pyrmq_up_delivers_a_delayed_message_not_before_its_time(tmp_path: Path, processes: list[Process]):
    import time

    up, endpoint = start_up(tmp_path, processes)
    create_topics_at(endpoint, "UpDelay")
    deliver_s = int(time.time()) + 3  # the Python client takes whole seconds
    try:
        [sent] = produce(tmp_path, endpoint, "UpDelay", [{"body": "later", "delivery_timestamp": deliver_s}])
    except AssertionError:
        raise AssertionError(up.log()) from None
    found: list[d.Message] = []
    for v2 in stub(endpoint):
        deadline = time.time() + 30
        while not found and time.time() < deadline:
            found = receive(v2, "UpDelay", group="UpDelayGroup", polling_s=2)[1]
        arrived_s = time.time()
        assert [m.body for m in found] == [b"later"] and found[0].system_properties.message_id == sent["message_id"]
        assert arrived_s >= deliver_s  # the scheduler never delivers early
        assert ack(v2, "UpDelay", found[0].system_properties.receipt_handle, group="UpDelayGroup").status.code == d.OK
    assert up.stop(signal.SIGTERM) == 0, up.log()
