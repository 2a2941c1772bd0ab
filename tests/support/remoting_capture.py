"""A throwaway remoting listener that records what a test peer (tests/remoting/peers) sends.

``CaptureServer`` accepts connections on 127.0.0.1:0 and reads RemotingCommand frames, each one:

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | total_len | int32 BE: 4 + header_len + body_len (its own 4 bytes not counted) |
| 4 | 4 | header_tag | int32 BE: serialize type (0 JSON, 1 ROCKETMQ binary) << 24 , header_len in the low 24 bits |
| 8 | header_len | header | JSON: code, language, version, opaque, flag (bit0 response, bit1 oneway), remark, extFields |
| 8 + header_len | body_len | body | raw bytes (a message body, a heartbeat's JSON ...) |

total = 4 + total_len bytes. It records each frame (``Frame``: the header as parsed, the body, the
exact bytes) and answers through ``answer``, a function of the frame and the server:

- ``answer_error`` (the default): SYSTEM_ERROR (code 1, remark "capture") to every request, so a
  peer gives up on it and moves on; nothing to a oneway request or a response.
- ``answer_as_route_and_broker``: GET_ROUTEINFO_BY_TOPIC (105) gets a route naming this listener as
  broker-a's master, HEART_BEAT (34) and UNREGISTER_CLIENT (35) SUCCESS, SEND_MESSAGE (10) and
  SEND_MESSAGE_V2 (310) SUCCESS with a made-up msgId, queueId and queueOffset (the peer then prints
  a ``sent`` line); anything else SYSTEM_ERROR.

It is no broker: nothing is stored. Its job is to show what a peer puts on the wire (the golden
frames under tests/remoting/golden) while pyrmq's own remoting port does not exist.
``python -m tests.support.remoting_capture`` rewrites those golden files.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.waits import wait_until

FRAME_HEAD = struct.Struct(">ii")  # total_len, header_tag
SERIALIZE_JSON = 0
FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1
SERVER_VERSION = 479  # RocketMQ V5_3_3's ordinal (MQVersion), as a 5.3.3 server sends it

# Request codes (RocketMQ RequestCode) and response codes (ResponseCode) this listener knows.
SEND_MESSAGE = 10
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
GET_ROUTEINFO_BY_TOPIC = 105
SEND_MESSAGE_V2 = 310
SUCCESS = 0
SYSTEM_ERROR = 1

FRAME_MAX_BYTES = 16 * 1024 * 1024  # RocketMQ's default frameMaxLength


@dataclass(frozen=True)
class Frame:
    """One frame a peer sent: its connection (numbered from 0 in accept order), the header (parsed
    JSON; {} for a binary header), the header's text, the body and the frame's exact bytes."""

    connection: int
    serialize_type: int
    header: dict[str, Any]
    header_text: str
    body: bytes
    raw: bytes

    @property
    def code(self) -> int:
        return int(self.header.get("code", -1))

    @property
    def opaque(self) -> int:
        return int(self.header.get("opaque", 0))

    @property
    def flag(self) -> int:
        return int(self.header.get("flag", 0))

    @property
    def is_request(self) -> bool:
        return not self.flag & FLAG_RESPONSE

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def ext_fields(self) -> dict[str, Any]:
        return dict(self.header.get("extFields") or {})


def encode_frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    """A JSON-header frame, as a Java server writes it (keys sorted, compact)."""
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return FRAME_HEAD.pack(4 + len(text) + len(body), (SERIALIZE_JSON << 24) | len(text)) + text + body


def decode_frame(data: bytes, connection: int = 0) -> Frame:
    """``data``: one whole frame, its length prefix included."""
    total_len, tag = FRAME_HEAD.unpack_from(data)
    assert total_len + 4 == len(data), f"frame of {len(data)} bytes says total_len {total_len}"
    serialize_type, header_len = tag >> 24 & 0xFF, tag & 0xFFFFFF
    raw_header = data[8 : 8 + header_len]
    if serialize_type == SERIALIZE_JSON:
        header_text = raw_header.decode()
        header = json.loads(header_text)
    else:
        header_text, header = raw_header.hex(), {}
    return Frame(connection, serialize_type, header, header_text, data[8 + header_len :], data)


def response_header(request: Frame, code: int, remark: str | None = None, **ext_fields: str) -> dict[str, Any]:
    header: dict[str, Any] = {
        "code": code,
        "extFields": ext_fields,
        "flag": FLAG_RESPONSE,
        "language": "JAVA",
        "opaque": request.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": SERVER_VERSION,
    }
    if remark is not None:
        header["remark"] = remark
    return header


Answer = Callable[[Frame, "CaptureServer"], bytes | None]


def answer_error(frame: Frame, server: CaptureServer) -> bytes | None:
    """SYSTEM_ERROR to every request; nothing to a oneway request or a response."""
    if not frame.is_request or frame.is_oneway:
        return None
    return encode_frame(response_header(frame, SYSTEM_ERROR, "capture"))


def route_body(address: str, broker_name: str = "broker-a", queues: int = 4) -> bytes:
    """A TopicRouteData naming ``address`` as the master (brokerId 0) of one broker, read and write
    (perm 6), in standard JSON with quoted map keys."""
    route = {
        "brokerDatas": [{"brokerAddrs": {"0": address}, "brokerName": broker_name, "cluster": "DefaultCluster"}],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": broker_name,
                "perm": 6,
                "readQueueNums": queues,
                "topicSysFlag": 0,
                "writeQueueNums": queues,
            }
        ],
    }
    return json.dumps(route, separators=(",", ":")).encode()


def offset_msg_id(address: str, commitlog_offset: int) -> str:
    """RocketMQ's offsetMsgId: store host (4 bytes of IPv4, int32 port) and int64 commit-log
    offset, as 32 upper-case hex digits."""
    host, port = address.rsplit(":", 1)
    return (socket.inet_aton(host) + struct.pack(">iq", int(port), commitlog_offset)).hex().upper()


def answer_as_route_and_broker(frame: Frame, server: CaptureServer) -> bytes | None:
    """Routes name this listener; heartbeats and sends succeed (nothing is stored)."""
    if not frame.is_request or frame.is_oneway:
        return None
    if frame.code == GET_ROUTEINFO_BY_TOPIC:
        return encode_frame(response_header(frame, SUCCESS), route_body(server.address))
    if frame.code in (HEART_BEAT, UNREGISTER_CLIENT):
        return encode_frame(response_header(frame, SUCCESS))
    if frame.code in (SEND_MESSAGE, SEND_MESSAGE_V2):
        fields = frame.ext_fields
        queue_id = fields.get("queueId", fields.get("e", 0))
        offset = server.next_send_offset()
        header = response_header(
            frame,
            SUCCESS,
            msgId=offset_msg_id(server.address, offset * 100),
            queueId=str(queue_id),
            queueOffset=str(offset),
        )
        return encode_frame(header)
    return encode_frame(response_header(frame, SYSTEM_ERROR, "capture"))


class CaptureServer:
    """The listener: ``frames()`` is every frame received so far, in arrival order; ``wait_for``
    waits for one with a given code. A context manager (``stop`` on exit)."""

    def __init__(self, answer: Answer = answer_error) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._frames: list[Frame] = []
        self._connections: list[socket.socket] = []
        self._sends = 0
        self._stopped = False
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="capture-accept")]
        self._threads[0].start()

    def frames(self, code: int | None = None) -> list[Frame]:
        with self._lock:
            return [f for f in self._frames if code is None or f.code == code]

    def wait_for(self, code: int, timeout_s: float = 10.0, count: int = 1) -> list[Frame]:
        """The first ``count`` requests with ``code``; AssertionError, listing the codes seen, if
        they do not all come within ``timeout_s``."""
        found = wait_until(
            lambda: [f for f in self.frames(code) if f.is_request],
            timeout_s,
            what=f"{count} request(s) with code {code} at {self.address}",
            describe=lambda: [f.code for f in self.frames()],
            accept=lambda requests: len(requests) >= count,
        )
        return found[:count]

    def next_send_offset(self) -> int:
        with self._lock:
            self._sends += 1
            return self._sends - 1

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # the listener was closed: stop
                return
            with self._lock:
                if self._stopped:
                    conn.close()
                    return
                number = len(self._connections)
                self._connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn, number), daemon=True, name="capture-conn")
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        reader = conn.makefile("rb")
        try:
            while (head := reader.read(4)) and len(head) == 4:
                (total_len,) = struct.unpack(">i", head)
                if not 4 <= total_len <= FRAME_MAX_BYTES:
                    return  # not a frame: a real server closes the channel too
                rest = reader.read(total_len)
                if len(rest) < total_len:
                    return
                frame = decode_frame(head + rest, number)
                with self._lock:
                    self._frames.append(frame)
                reply = self._answer(frame, self)
                if reply is not None:
                    conn.sendall(reply)
        except OSError:  # the peer went away, or stop() closed the socket
            return
        finally:
            reader.close()
            conn.close()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            connections = list(self._connections)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way (Linux)
        except OSError:  # not connected: nothing to wake
            pass
        self._listener.close()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by its peer
                pass
            conn.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> CaptureServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# What the golden files hold (tests/remoting/golden/<peer>.json) and tests/remoting/test_peer_frames.py
# checks: each peer's first frames in a few scenarios against this listener.
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "remoting" / "golden"
TOPIC, GROUP = "PeerFrameTopic", "PeerFrameGroup"
SEND_CODE = {"ali-ons": SEND_MESSAGE_V2, "cpp": SEND_MESSAGE}  # ali-ons sends only V2, cpp only V1
GET_CONSUMER_LIST_BY_GROUP = 38
END_TRANSACTION = 37


@dataclass(frozen=True)
class Scenario:
    """A peer run against this listener (``answer``) and the frames kept from it: golden name ->
    request code (``None``: the peer's send code), the first request with that code."""

    name: str
    role: str
    answer: Answer
    frames: dict[str, int | None]
    peers: tuple[str, ...] = ("ali-ons", "cpp")

    def command(self, address: str) -> dict[str, Any]:
        message = {"body": "hello", "tag": "TagA", "keys": ["k1", "k2"], "props": {"a": "1"}}
        return {"role": self.role, "nameSrv": address, "topic": TOPIC, "group": GROUP, "messages": [message]}

    def codes(self, peer: str) -> dict[str, int]:
        return {name: SEND_CODE[peer] if code is None else code for name, code in self.frames.items()}


SCENARIOS = (
    # Every request refused: the producer's first route request, then it gives up.
    Scenario("refused", "producer", answer_error, {"route": GET_ROUTEINFO_BY_TOPIC}),
    # Routes name this listener: the producer sends (and says goodbye when it exits).
    Scenario("send", "producer", answer_as_route_and_broker, {"send": None, "unregister": UNREGISTER_CLIENT}),
    # A consumer's heartbeat (its subscriptions in the body) and its rebalance's consumer list.
    Scenario(
        "consume",
        "push-consumer",
        answer_as_route_and_broker,
        {"heart_beat": HEART_BEAT, "consumer_list": GET_CONSUMER_LIST_BY_GROUP},
    ),
    # The half message (sysFlag 4, TRAN_MSG), the local answer, the producer's heartbeat (cpp only:
    # ali-ons has no transaction producer).
    Scenario(
        "transaction",
        "transaction-producer",
        answer_as_route_and_broker,
        {"send_prepared": SEND_MESSAGE, "end_transaction": END_TRANSACTION, "heart_beat_producer": HEART_BEAT},
        peers=("cpp",),
    ),
)


def capture(peer: str, scenario: Scenario, home: Path, timeout_s: float = 8.0) -> dict[str, Frame]:
    """Run ``scenario`` with ``peer`` against a fresh listener; its frames by golden name."""
    from tests.support.remoting_peers import start_peer  # it needs the peers installed: import late

    with CaptureServer(scenario.answer) as server:
        process = start_peer(peer, scenario.command(server.address), home, timeout_s=timeout_s)
        try:
            return {name: server.wait_for(code, timeout_s)[0] for name, code in scenario.codes(peer).items()}
        finally:
            process.stop()


def frame_record(frame: Frame) -> dict[str, Any]:
    """A frame as a golden file keeps it: the header parsed and as sent, the body, the whole frame."""
    return {
        "code": frame.code,
        "header": frame.header,
        "header_text": frame.header_text,
        "body_b64": base64.b64encode(frame.body).decode(),
        "frame_b64": base64.b64encode(frame.raw).decode(),
    }


def json_type(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", type(None): "null"}.get(
        type(value), "list" if isinstance(value, list) else "object"
    )


def header_shape(header: dict[str, Any]) -> dict[str, Any]:
    """What must not change between runs of one peer version: code, language, version, flag, the
    header's keys, and each extFields key with its JSON type (values vary: opaque, timestamps ...)."""
    return {
        "code": header.get("code"),
        "language": header.get("language"),
        "version": header.get("version"),
        "flag": header.get("flag"),
        "keys": sorted(header),
        "extFields": {key: json_type(value) for key, value in (header.get("extFields") or {}).items()},
    }


def json_shape(value: Any) -> Any:
    """A JSON value's structure: objects keep their keys, lists the distinct shapes of their items,
    scalars become their type's name."""
    if isinstance(value, dict):
        return {key: json_shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        shapes = {json.dumps(json_shape(item), sort_keys=True) for item in value}
        return [json.loads(shape) for shape in sorted(shapes)]
    return json_type(value)


def golden_path(peer: str) -> Path:
    return GOLDEN_DIR / f"{peer}.json"


def load_golden(peer: str) -> dict[str, Any]:
    return dict(json.loads(golden_path(peer).read_text()))


def write_golden(peer: str, home: Path) -> Path:
    """Capture every scenario of ``peer`` and write its golden file."""
    from tests.support.remoting_peers import CLIENT

    frames: dict[str, Any] = {}
    for scenario in SCENARIOS:
        if peer in scenario.peers:
            for name, frame in capture(peer, scenario, home).items():
                frames[name] = {"scenario": scenario.name, **frame_record(frame)}
    golden = {
        "peer": peer,
        "client": CLIENT[peer],
        "note": "Frames the peer sent to tests/support/remoting_capture.py; rewrite with "
        "`.venv/bin/python -m tests.support.remoting_capture`. Opaque, timestamps, client ids "
        "and UNIQ_KEYs vary from run to run; tests compare header_shape and json_shape.",
        "frames": frames,
    }
    path = golden_path(peer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pyrmq-capture-") as tmp:
        for name in ("ali-ons", "cpp"):
            print(write_golden(name, Path(tmp) / name))
