"""Raw remoting frames for the bad-input tests: ``FrameSocket``, one blocking connection that
sends any bytes and reads the answer to one request at a time (or sees the door close it), and
builders of frames the codec would not write (``json_frame``: any JSON header, numbers and nulls
in extFields as ali-ons and the C++ client send them; ``binary_frame``: a ROCKETMQ header with any
int16 code). Frame layout: services/domain/remoting/command.py."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import time
from dataclasses import dataclass

from services.domain.remoting.codes import RequestCode
from services.domain.remoting.command import RemotingCommand, decode, encode

_opaques = itertools.count(1_000_000)
PROBE = RequestCode.GET_BROKER_CLUSTER_INFO  # a request every healthy door answers SUCCESS


def next_opaque() -> int:
    return next(_opaques)


@dataclass(frozen=True)
class Raw:
    """A request given as frame bytes (a header the codec would not write); ``opaque`` is the one
    inside it, which the answer carries (None: no answer is expected, the door closes)."""

    frame: bytes
    opaque: int | None


def json_frame(header: object, body: bytes = b"", header_bytes: bytes | None = None) -> bytes:
    """A frame with this JSON header (any JSON value, ASCII escapes: lone surrogates travel as
    ``\\udXXX``), or with ``header_bytes`` verbatim."""
    data = header_bytes if header_bytes is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(data) + len(body), len(data)) + data + body


def binary_frame(code: int, ext_fields: dict[str, str], opaque: int, body: bytes = b"", flag: int = 0) -> bytes:
    """A ROCKETMQ (binary) header; ``code`` is any 16 bits (above 32767 reads as negative in Java)."""
    ext = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
        for k, v in ((key.encode(), value.encode()) for key, value in ext_fields.items())
    )
    header = (
        struct.pack(">Hbhii", code & 0xFFFF, 0, 479, opaque, flag) + struct.pack(">i", 0) + struct.pack(">i", len(ext))
    )
    header += ext
    return struct.pack(">ii", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


class FrameSocket:
    """One connection to the door. ``call`` sends a command or raw frame and returns the answer
    with its opaque, or None once the door closed the connection; requests the door sends
    (NOTIFY_CONSUMER_IDS_CHANGED) are skipped."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self.closed = False
        self.skipped: list[RemotingCommand] = []  # frames read while waiting for another answer

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> FrameSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, request: RemotingCommand | Raw, timeout_s: float = 10.0) -> RemotingCommand | None:
        if isinstance(request, Raw):
            self.send(request.frame)
            return self.answer(request.opaque, timeout_s) if request.opaque is not None else None
        request.opaque = next_opaque()
        self.send(encode(request))
        return self.answer(request.opaque, timeout_s)

    def probe(self, timeout_s: float = 10.0) -> int | None:
        """The code of a cluster-info request on this connection (None: closed)."""
        answer = self.call(RemotingCommand(PROBE), timeout_s)
        return None if answer is None else answer.code

    def answer(self, opaque: int, timeout_s: float = 10.0) -> RemotingCommand | None:
        deadline = time.monotonic() + timeout_s
        while True:
            command = self._next_frame(deadline)
            if command is None:
                return None
            if command.is_response and command.opaque == opaque:
                return command
            self.skipped.append(command)

    def wait_closed(self, timeout_s: float = 10.0) -> bool:
        """True once the door closed the connection (anything it sent first is dropped)."""
        deadline = time.monotonic() + timeout_s
        while not self.closed:
            if not self._recv(deadline):
                return self.closed
        return True

    def _next_frame(self, deadline: float) -> RemotingCommand | None:
        while True:
            if len(self._buffer) >= 4:
                (size,) = struct.unpack_from(">i", self._buffer)
                if len(self._buffer) >= 4 + size:
                    frame = bytes(self._buffer[4 : 4 + size])
                    del self._buffer[: 4 + size]
                    return decode(frame)
            if self.closed or not self._recv(deadline):
                if not self.closed:
                    raise TimeoutError("no answer from the remoting door in time")
                return None

    def _recv(self, deadline: float) -> bool:
        """Read what arrived before ``deadline``; False if nothing did (or the peer closed)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self._buffer += chunk
        return True
