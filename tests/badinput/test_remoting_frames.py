"""Frames the remoting door cannot read (../shared/docs/remoting.md §1.1, §1.4): each closes THAT
connection and nothing else, as RocketMQ's NettyDecoder does. A connection opened before the bad
one and one opened after still get answers, the door's loop logs no error (an exception escaping
``data_received`` would), and nothing stored moves. Then the edges of framing: a frame of exactly
16 MiB is read, a frame sent a byte at a time is answered, a slow client holding half a frame
blocks nobody, a oneway request is never answered, a stray response is dropped.
"""

from __future__ import annotations

import json
import logging
import random
import struct

import pytest

from services.domain.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode, ResponseCode
from services.domain.remoting.command import FRAME_MAX_BYTES, RemotingCommand, encode
from tests.badinput.remoting_wire import FrameSocket, json_frame, next_opaque
from tests.support.badinput_cluster import Cluster
from tests.support.waits import wait_until

CLOSE_WAIT_S = 5.0


def _frame(tag: int, header: bytes, body: bytes = b"", size: int | None = None) -> bytes:
    """total_len (``size``, default the true one), header_tag, header, body."""
    total = 4 + len(header) + len(body) if size is None else size
    return struct.pack(">ii", total, tag) + header + body


def _binary(fixed: bytes, rest: bytes) -> bytes:
    header = fixed + rest
    return _frame((1 << 24) | len(header), header)


FIXED = struct.pack(
    ">hbhii", RequestCode.GET_BROKER_CLUSTER_INFO, 0, 479, 1, 0
)  # code, language, version, opaque, flag

BAD_FRAMES: dict[str, bytes] = {
    # total_len
    "length 16 MiB + 1": struct.pack(">i", FRAME_MAX_BYTES + 1),
    "length 2^31 - 1": struct.pack(">i", 2**31 - 1),
    "length -1": struct.pack(">i", -1),
    "length -2^31": struct.pack(">i", -(2**31)),
    "length 0": struct.pack(">i", 0),
    "length 3": struct.pack(">i", 3) + b"abc",
    # header_tag
    "header length past the frame": _frame(100, b"{}"),
    "header length 2^24 - 1 in a small frame": _frame(0xFFFFFF, b"{}"),
    "serialize type 2": _frame((2 << 24) | 2, b"{}"),
    "serialize type 0xFF": _frame(-1 & ~0xFFFFFF | 2, b"{}"),
    # JSON header
    "JSON header empty": _frame(0, b""),
    "JSON header not JSON": json_frame(None, header_bytes=b"{nope"),
    "JSON header invalid UTF-8": json_frame(None, header_bytes=b'{"code":105,"remark":"\xff\xfe"}'),
    "JSON header an array": json_frame([105]),
    "JSON header a string": json_frame("code"),
    "JSON header a number": json_frame(105),
    "JSON header null": json_frame(None),
    "JSON header without code": json_frame({"opaque": 1, "flag": 0}),
    "JSON code letters": json_frame({"code": "abc", "opaque": 1}),
    "JSON code null": json_frame({"code": None, "opaque": 1}),
    "JSON code an object": json_frame({"code": {"a": 1}, "opaque": 1}),
    "JSON code Infinity": json_frame(None, header_bytes=b'{"code":Infinity,"opaque":1}'),
    "JSON code NaN": json_frame(None, header_bytes=b'{"code":NaN,"opaque":1}'),
    "JSON code 1e400": json_frame(None, header_bytes=b'{"code":1e400,"opaque":1}'),
    "JSON code of 5000 digits": json_frame(None, header_bytes=b'{"code":' + b"9" * 5000 + b"}"),
    "JSON opaque letters": json_frame({"code": 105, "opaque": "abc"}),
    "JSON extFields an array": json_frame({"code": 105, "opaque": 1, "extFields": ["topic"]}),
    "JSON nested 100000 deep": json_frame(None, header_bytes=b"[" * 100_000),
    # ROCKETMQ binary header
    "binary header of 5 bytes": _binary(FIXED[:5], b""),
    "binary header without extFields length": _binary(FIXED, struct.pack(">i", 0)),
    "binary remark length past the header": _binary(FIXED, struct.pack(">i", 1000) + b"ab"),
    "binary remark length negative": _binary(FIXED, struct.pack(">ii", -5, 0)),
    "binary remark invalid UTF-8": _binary(FIXED, struct.pack(">i", 2) + b"\xff\xfe" + struct.pack(">i", 0)),
    "binary extFields length past the header": _binary(FIXED, struct.pack(">ii", 0, 1000)),
    "binary extFields length negative": _binary(FIXED, struct.pack(">ii", 0, -1)),
    "binary key length past extFields": _binary(FIXED, struct.pack(">ii", 0, 6) + struct.pack(">h", 50) + b"abcd"),
    "binary value length negative": _binary(
        FIXED, struct.pack(">ii", 0, 7) + struct.pack(">h", 1) + b"k" + struct.pack(">i", -3)
    ),
    # not RocketMQ at all
    "HTTP request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "TLS ClientHello": bytes.fromhex("16030100a5010000a10303") + bytes(160),
    "garbage": b"\xff" + random.Random(29).randbytes(255),
}


def _door_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("label", sorted(BAD_FRAMES))
def test_a_bad_frame_closes_that_connection_only(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, label: str
) -> None:
    before = cluster.snapshot()
    with FrameSocket(cluster.remoting_address) as earlier, FrameSocket(cluster.remoting_address) as bad:
        assert earlier.probe() == ResponseCode.SUCCESS
        bad.send(BAD_FRAMES[label])
        assert bad.wait_closed(CLOSE_WAIT_S), f"{label}: the door kept the connection open"
        assert earlier.probe() == ResponseCode.SUCCESS, f"{label}: another connection stopped serving"
        with FrameSocket(cluster.remoting_address) as later:
            assert later.probe() == ResponseCode.SUCCESS
    assert _door_errors(caplog) == [], f"{label}: the door logged an error"
    assert cluster.snapshot() == before


def test_a_frame_of_exactly_16_mib_is_read(cluster: Cluster) -> None:
    """The limit itself is a frame: a send of that size is answered (its body is too large)."""
    fields = {"a": "PG", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
    header = json.dumps({"code": RequestCode.SEND_MESSAGE_V2, "opaque": 7, "flag": 0, "extFields": fields}).encode()
    body = b"x" * (FRAME_MAX_BYTES - 4 - len(header))
    before = cluster.snapshot()
    with FrameSocket(cluster.remoting_address) as conn:
        conn.send(json_frame(None, body, header_bytes=header))
        answer = conn.answer(7)
        assert answer is not None and answer.code == ResponseCode.MESSAGE_ILLEGAL, answer
        assert conn.probe() == ResponseCode.SUCCESS
    assert cluster.snapshot() == before


def test_a_slow_client_blocks_nobody(cluster: Cluster) -> None:
    """Half a frame held (slow-loris), a 16 MiB frame announced and never sent: other connections
    are answered meanwhile; a frame sent a byte at a time is answered once whole."""
    request = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, next_opaque())
    data = encode(request)
    with (
        FrameSocket(cluster.remoting_address) as slow,
        FrameSocket(cluster.remoting_address) as announced,
        FrameSocket(cluster.remoting_address) as other,
    ):
        slow.send(data[: len(data) // 2])
        announced.send(struct.pack(">ii", FRAME_MAX_BYTES, 2) + b"{}" + b"x" * 1024)
        for _ in range(3):
            assert other.probe() == ResponseCode.SUCCESS
        for byte in data[len(data) // 2 :]:
            slow.send(bytes([byte]))
        answer = slow.answer(request.opaque)
        assert answer is not None and answer.code == ResponseCode.SUCCESS
        assert other.probe() == ResponseCode.SUCCESS


def test_oneway_and_stray_responses_get_no_answer(cluster: Cluster) -> None:
    """A oneway request (even an unknown code) is never answered; a response to no request of
    the door's is dropped; the connection serves on."""
    with FrameSocket(cluster.remoting_address) as conn:
        oneway = RemotingCommand(9999, next_opaque(), FLAG_ONEWAY)
        stray = RemotingCommand(0, next_opaque(), FLAG_RESPONSE)
        conn.send(encode(oneway) + encode(stray))
        assert conn.probe() == ResponseCode.SUCCESS
        assert [c for c in conn.skipped if c.opaque in (oneway.opaque, stray.opaque)] == []


def test_connections_closed_for_bad_frames_are_released(cluster: Cluster) -> None:
    """Fifty connections closed for garbage leave no channel behind in the door."""
    server = cluster.remoting.server
    baseline = len(server.channels)
    for n in range(50):
        with FrameSocket(cluster.remoting_address) as bad:
            bad.send(BAD_FRAMES["garbage"] if n % 2 else BAD_FRAMES["JSON header not JSON"])
            assert bad.wait_closed(CLOSE_WAIT_S)
    wait_until(lambda: len(server.channels) <= baseline, what="the door to drop closed channels")
    with FrameSocket(cluster.remoting_address) as conn:
        assert conn.probe() == ResponseCode.SUCCESS
