"""The remoting test peers (tests/support/remoting_peers.py) put on the wire what their golden
files (tests/remoting/golden) recorded: each runs against the capture listener
(tests/support/remoting_capture.py), which records its frames, and each frame keeps its golden
shape (code, language, version, flag, header keys, extFields keys with their JSON types; a JSON
body's structure). The drivers' event lines are checked on the way: a send the listener accepts
is a ``sent`` event with the listener's answer. Without its peer a test fails under
PYRMQ_REQUIRE_COMPONENTS=1 (`make test`); `make setup` installs both."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.support.remoting_capture import (
    GET_ROUTEINFO_BY_TOPIC,
    GROUP,
    SCENARIOS,
    SEND_CODE,
    TOPIC,
    CaptureServer,
    Frame,
    answer_as_route_and_broker,
    capture,
    header_shape,
    json_shape,
    load_golden,
    offset_msg_id,
)
from tests.support.remoting_peers import LANGUAGE, start_peer

PEERS = [
    pytest.param(peer, marks=pytest.mark.needs(component), id=peer)
    for peer, component in (("ali-ons", "ali-ons"), ("cpp", "rocketmq-client-cpp"))
]
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def check_against_golden(peer: str, frames: dict[str, Frame]) -> None:
    golden = load_golden(peer)["frames"]
    for name, frame in frames.items():
        recorded = golden[name]
        assert header_shape(frame.header) == header_shape(recorded["header"]), (peer, name, frame.header_text)
        body = base64.b64decode(recorded["body_b64"])
        if body[:1] == b"{":  # a JSON body (a heartbeat): its structure, not its values
            assert json_shape(json.loads(frame.body)) == json_shape(json.loads(body)), (peer, name, frame.body)
        else:
            assert frame.body == body, (peer, name)


@pytest.mark.parametrize("peer", PEERS)
def test_first_route_request(peer: str, tmp_path: Path) -> None:
    frames = capture(peer, BY_NAME["refused"], tmp_path)
    route = frames["route"]
    assert route.code == GET_ROUTEINFO_BY_TOPIC and route.serialize_type == 0
    assert route.header["language"] == LANGUAGE[peer]
    assert route.ext_fields["topic"] == TOPIC
    check_against_golden(peer, frames)


@pytest.mark.parametrize("peer", PEERS)
def test_send_and_goodbye(peer: str, tmp_path: Path) -> None:
    frames = capture(peer, BY_NAME["send"], tmp_path)
    send = frames["send"]
    assert send.code == SEND_CODE[peer] and send.body == b"hello"
    fields = send.ext_fields
    properties = fields["i"] if peer == "ali-ons" else fields["properties"]
    assert "TAGS\x01TagA\x02" in properties and "KEYS\x01k1 k2\x02" in properties and "a\x011\x02" in properties
    assert (fields["b"] if peer == "ali-ons" else fields["topic"]) == TOPIC
    assert frames["unregister"].ext_fields["producerGroup"] == GROUP
    check_against_golden(peer, frames)


@pytest.mark.parametrize("peer", PEERS)
def test_consumer_heartbeat(peer: str, tmp_path: Path) -> None:
    frames = capture(peer, BY_NAME["consume"], tmp_path)
    heartbeat = json.loads(frames["heart_beat"].body)
    (consumer,) = heartbeat["consumerDataSet"]
    assert consumer["groupName"] == GROUP
    assert {s["topic"] for s in consumer["subscriptionDataSet"]} == {TOPIC, f"%RETRY%{GROUP}"}
    assert frames["consumer_list"].ext_fields["consumerGroup"] == GROUP
    check_against_golden(peer, frames)


@pytest.mark.needs("rocketmq-client-cpp")
def test_cpp_transaction_half_message_and_end(tmp_path: Path) -> None:
    frames = capture("cpp", BY_NAME["transaction"], tmp_path)
    half, end = frames["send_prepared"], frames["end_transaction"]
    assert half.ext_fields["sysFlag"] == 4 and "TRAN_MSG\x01true\x02" in half.ext_fields["properties"]
    # The local transaction answered UNKNOWN: commitOrRollback 0 (TRANSACTION_NOT_TYPE).
    assert end.ext_fields["commitOrRollback"] == "0" and end.ext_fields["producerGroup"] == GROUP
    check_against_golden("cpp", frames)


@pytest.mark.parametrize("peer", PEERS)
def test_driver_reports_the_send_result(peer: str, tmp_path: Path) -> None:
    with CaptureServer(answer_as_route_and_broker) as server:
        command = BY_NAME["send"].command(server.address)
        command["messages"].append({"body": "second", "tag": "TagB"})
        with start_peer(peer, command, tmp_path) as process:
            sent = process.wait_events("sent", 2)
            process.wait_event("done")
            assert process.wait_exit() == 0
        assert [e["index"] for e in sent] == [0, 1]
        assert [e["queueOffset"] for e in sent] == [0, 1]  # the listener counts sends from 0
        assert all(e["status"] in ("SEND_OK", "OK") for e in sent)
        if peer == "ali-ons":  # the broker's msgId is all ali-ons has
            assert [e["msgId"] for e in sent] == [offset_msg_id(server.address, n * 100) for n in (0, 1)]
        else:  # the UNIQ_KEY the client put in the message's properties
            sends = server.frames(SEND_CODE[peer])
            assert [e["msgId"] for e in sent] == [
                dict(p.split("\x01") for p in f.ext_fields["properties"].split("\x02") if p)["UNIQ_KEY"] for f in sends
            ]
        assert process.events("closed")[0]["clean"] is True
