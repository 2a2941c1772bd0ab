"""A minimal blocking RocketMQ remoting client for tests and benches: one socket, requests
matched to responses by opaque, server requests (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE) kept in ``server_requests``; plus the header shapes the Java client
sends, so golden bytes and real peers agree with what tests build."""

from __future__ import annotations

import itertools
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future

from services.broker.remoting.door import RemotingDoor
from services.domain.format.commitlog_format import MessageRecord, decode_record
from services.domain.format.properties_format import encode_properties
from services.domain.remoting.codes import RequestCode
from services.domain.remoting.command import (
    SERIALIZE_JSON,
    RemotingCommand,
    decode,
    encode,
    frame_length,
)

_opaques = itertools.count(1)


class RemotingTestClient:
    def __init__(
        self,
        address: str,
        serialize_type: int = SERIALIZE_JSON,
        language: str = "JAVA",
        version: int = 479,
        tls: ssl.SSLContext | None = None,
    ):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        if tls is not None:  # the Java client's useTLS
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.serialize_type = serialize_type
        self.language = language
        self.version = version
        self._pending: dict[int, Future[RemotingCommand]] = {}
        self._lock = threading.Lock()
        self.server_requests: list[RemotingCommand] = []
        self.closed = threading.Event()
        # A TLS socket is read and written by one thread only (an SSL object is not safe for a
        # reader and a writer at once): requests then wait for their answers in send_command.
        self._sync_buffer: bytearray | None = bytearray() if tls is not None else None
        self._reader = threading.Thread(target=self._read, daemon=True)
        if self._sync_buffer is None:
            self._reader.start()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader.is_alive():  # out of recv before the descriptor number is given again
            self._reader.join(10)
        self.sock.close()

    def __enter__(self) -> RemotingTestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 4:
                    size = frame_length(buffer)
                    if len(buffer) < 4 + size:
                        break
                    command = decode(bytes(buffer[4 : 4 + size]))
                    del buffer[: 4 + size]
                    if command.is_response:
                        with self._lock:
                            future = self._pending.pop(command.opaque, None)
                        if future is not None:
                            future.set_result(command)
                    else:
                        self.server_requests.append(command)
        except OSError:
            pass
        finally:
            self.closed.set()
            with self._lock:
                pending, self._pending = self._pending, {}
            for future in pending.values():
                future.set_exception(ConnectionError("closed"))

    def command(
        self, code: int, ext_fields: Mapping[str, str] | None = None, body: bytes = b"", oneway: bool = False
    ) -> RemotingCommand:
        return RemotingCommand(
            code,
            next(_opaques),
            2 if oneway else 0,
            dict(ext_fields or {}),
            body,
            None,
            self.language,
            self.version,
            self.serialize_type,
        )

    def send_command(self, command: RemotingCommand) -> Future[RemotingCommand]:
        future: Future[RemotingCommand] = Future()
        if not command.is_oneway:
            with self._lock:
                self._pending[command.opaque] = future
        else:
            future.set_result(command)
        self.sock.sendall(encode(command))
        if self._sync_buffer is not None and not command.is_oneway:
            self._read_until(lambda: future.done())
        return future

    def _read_until(self, done: Callable[[], bool]) -> None:
        """TLS: read frames on this thread until ``done()`` (answers complete their futures)."""
        buffer = self._sync_buffer
        assert buffer is not None
        while not done():
            while len(buffer) >= 4 and len(buffer) >= 4 + frame_length(buffer):
                size = frame_length(buffer)
                command = decode(bytes(buffer[4 : 4 + size]))
                del buffer[: 4 + size]
                if command.is_response:
                    with self._lock:
                        waiting = self._pending.pop(command.opaque, None)
                    if waiting is not None:
                        waiting.set_result(command)
                else:
                    self.server_requests.append(command)
                if done():
                    return
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self.closed.set()
                raise ConnectionError("closed")
            buffer += chunk

    def call(
        self,
        code: int,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
        timeout_s: float = 10.0,
    ) -> RemotingCommand:
        return self.send_command(self.command(code, ext_fields, body)).result(timeout_s)

    def oneway(self, code: int, ext_fields: Mapping[str, str] | None = None, body: bytes = b"") -> None:
        self.send_command(self.command(code, ext_fields, body, oneway=True))

    # -- the Java client's requests ---------------------------------------------------------------
    def send_v2(
        self,
        topic: str,
        body: bytes,
        properties: Mapping[str, str],
        queue_id: int = 0,
        group: str = "PG",
        sys_flag: int = 0,
        born_ms: int = 0,
        timeout_s: float = 10.0,
    ) -> RemotingCommand:
        fields = {
            "a": group,
            "b": topic,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": str(born_ms),
            "h": "0",
            "i": encode_properties(dict(properties)).decode(),
            "j": "0",
            "k": "false",
            "m": "false",
        }
        return self.call(RequestCode.SEND_MESSAGE_V2, fields, body, timeout_s)

    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        sys_flag: int = 0x4,
        subscription: str = "*",
        suspend_ms: int = 0,
        commit_offset: int = 0,
        timeout_s: float = 10.0,
    ) -> RemotingCommand:
        fields = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": subscription,
            "subVersion": "0",
            "expressionType": "TAG",
        }
        return self.call(RequestCode.PULL_MESSAGE, fields, timeout_s=timeout_s)


def stored_records(body: bytes) -> list[MessageRecord]:
    """The records of a PULL / POP / QUERY body (concatenated stored records), decoded."""
    out, pos = [], 0
    while pos < len(body):
        record = decode_record(body, pos, len(body), check_crc=False)
        assert isinstance(record, MessageRecord), "a body holds no blank records"
        out.append(record)
        pos += record.total_size
    return out


def rebalanced(door: RemotingDoor, group: str, topic: str, consumers: int, queues: int) -> bool:
    """Each of the topic's queues pulled by one consumer of the group, ``consumers`` of them
    pulling (held pulls show who pulls which queue): a rebalance is done."""
    held = door.pulls.held_queues(group, topic)
    owners = {queue: address for address, queue in held}
    return len(held) == queues and len(owners) == queues and len(set(owners.values())) == consumers
