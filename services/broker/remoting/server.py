"""The remoting door's I/O: an asyncio event loop on a thread of its own serving RemotingCommand
frames (services/domain/remoting/command.py) on the remoting port. No broker logic here: each
request goes to the ``Dispatcher`` (dispatch.py), which answers on the loop or from its workers.

* **Framing:** a connection's bytes are split into frames by their int32 length; a frame over
  ``FRAME_MAX_BYTES`` (16 MiB) or one that does not decode closes that connection alone.
* **Both directions on one socket:** a frame with the response bit answers a request this
  server sent (``Channel.request``: CHECK_TRANSACTION_STATE is oneway, GET_CONSUMER_RUNNING_INFO
  waits), matched by opaque; any other frame is a request.
* **Writes** happen on the loop: a worker hands its encoded answer over with
  ``call_soon_threadsafe``; answers queued while the loop is busy go out in one ``write``.
* **TLS and plaintext on one port** (``tls``, the broker's ``tls_mode``): a connection whose
  first byte is 0x16 (a TLS ClientHello; a frame's first byte is 0) is TLS, decrypted through
  memory BIOs (``TlsSession``); ``tls_mode = tls`` closes plaintext ones.
* **Ports:** the main port, plus one per broker group named in ``group_ports`` (a connection
  there is that group's, for clients that name no ``bname``); ``SO_REUSEPORT`` when several
  broker processes share them.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, cast

from services.broker.remoting import commands
from services.broker.transaction import TransactionCheck
from services.domain.remoting.codes import FLAG_ONEWAY
from services.domain.remoting.command import FRAME_MAX_BYTES, FrameError, RemotingCommand, decode, encode
from services.domain.remoting.records import ipv4_host

log = logging.getLogger(__name__)

_opaques = itertools.count(1)  # this server's own requests (RocketMQ numbers them process-wide)


class Dispatch(Protocol):
    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        """Handle one request: answer it through ``channel.answer`` (now or later), or not at
        all when it is oneway."""

    def closed(self, channel: Channel) -> None:
        """The connection ended."""


class Channel(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: RemotingServer, broker_name: str = "") -> None:
        self._server = server
        self.broker_name = broker_name  # the broker group of the port it came in on ("": the main port)
        self._loop = server.loop
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._sniff = server.tls is not None  # the first byte tells TLS (0x16, a handshake) from frames
        self._tls: TlsSession | None = None
        self._pending: list[bytes] = []
        self._flush_scheduled = False
        self._responses: dict[int, Future[RemotingCommand]] = {}
        self.peer_address = ""  # "ip:port" of the client
        self.local_address = ""
        self.closed = False
        # Facts a HEART_BEAT (or any request) teaches: the clients on this connection.
        self.client_ids: set[str] = set()
        self.language = ""
        self.version = 0

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer_address = _address(transport.get_extra_info("peername"))
        self.local_address = _address(transport.get_extra_info("sockname"))
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server.channels.add(self)

    def data_received(self, data: bytes) -> None:
        if self._tls is not None or self._sniff:
            plain = self._tls_received(data)
            if not plain:
                return
            data = plain
        buffer = self._buffer
        buffer += data
        pos = 0
        end = len(buffer)
        dispatch = self._server.dispatcher.dispatch
        try:
            while end - pos >= 4:
                size = int.from_bytes(buffer[pos : pos + 4], "big", signed=True)
                if size < 4 or size > FRAME_MAX_BYTES:
                    raise FrameError(f"frame length {size} is outside 4..{FRAME_MAX_BYTES}")
                if end - pos - 4 < size:
                    break
                with memoryview(buffer) as view:
                    command = decode(view[pos + 4 : pos + 4 + size])
                pos += 4 + size
                if command.is_response:
                    self._answered(command)
                else:
                    dispatch(self, command)
        except FrameError as exc:
            log.warning("closing remoting connection from %s: %s", self.peer_address, exc)
            self.close()
            return
        except Exception:
            log.exception("closing remoting connection from %s", self.peer_address)
            self.close()
            return
        finally:
            if pos:
                del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.channels.discard(self)
        for future in self._responses.values():
            if not future.done():
                future.set_exception(ConnectionError(f"connection to {self.peer_address} closed"))
        self._responses.clear()
        self._server.dispatcher.closed(self)

    # -- writing (any thread) -------------------------------------------------------------------
    def answer(self, response: RemotingCommand) -> None:
        """Write a command (an answer or a request of this server's) from any thread."""
        self.write_frame(encode(response))

    def write_frame(self, frame: bytes) -> None:
        if threading.get_ident() == self._server.loop_thread_id:
            self._write(frame)
        else:
            self._loop.call_soon_threadsafe(self._write, frame)

    def _write(self, frame: bytes) -> None:
        if self._transport is None or self.closed:
            return
        self._pending.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        if self._transport is not None and not self.closed and pending:
            data = b"".join(pending) if len(pending) > 1 else pending[0]
            if self._tls is not None:
                try:
                    data = self._tls.encrypt(data)
                except ssl.SSLError as exc:
                    log.warning("closing TLS remoting connection from %s: %s", self.peer_address, exc)
                    self._transport.close()
                    return
            self._transport.write(data)

    # -- TLS on the same port -------------------------------------------------------------------
    def _tls_received(self, data: bytes) -> bytes:
        """The plaintext in ``data``: TLS records decrypted once the first byte said TLS."""
        tls_config = self._server.tls
        if self._sniff:
            self._sniff = False
            assert tls_config is not None
            if data[:1] == TLS_HANDSHAKE:
                self._tls = TlsSession(tls_config.context)
            elif tls_config.required:
                log.warning("closing remoting connection from %s: plaintext on a TLS-only port", self.peer_address)
                self.close()
                return b""
            else:
                return data
        tls = self._tls
        assert tls is not None and self._transport is not None
        try:
            plain = tls.receive(data)
        except ssl.SSLError as exc:
            log.warning("closing TLS remoting connection from %s: %s", self.peer_address, exc)
            self.close()
            return b""
        handshake = tls.outgoing()
        if handshake:
            self._transport.write(handshake)
        return plain

    def close(self) -> None:
        if threading.get_ident() != self._server.loop_thread_id:
            self._loop.call_soon_threadsafe(self.close)
            return
        if self._transport is not None:
            self._flush()
            self._transport.close()

    # -- requests to the client -------------------------------------------------------------------
    def oneway(self, command: RemotingCommand) -> None:
        command.opaque = next(_opaques)
        command.flag |= FLAG_ONEWAY
        self.answer(command)

    @property
    def advertised_address(self) -> str:
        """The address clients know this connection's port by (routes name it)."""
        return self._server.advertised.get(self.broker_name) or self._server.advertised.get("", self.local_address)

    # -- what the core asks of a classic client's connection (classic_clients.ClientChannel) -----
    def members_changed(self, group: str) -> None:
        self.oneway(commands.members_changed(group))

    def check_transaction(self, check: TransactionCheck) -> bool:
        if self.closed:
            return False
        self.oneway(commands.check_transaction_state(check, ipv4_host(self.advertised_address)))
        return True

    def request(self, command: RemotingCommand) -> Future[RemotingCommand]:
        """Send a request to the client; the future gets its response (or ConnectionError).
        The caller bounds the wait (``future.result(timeout)``)."""
        future: Future[RemotingCommand] = Future()
        command.opaque = next(_opaques)

        def send() -> None:
            if self.closed:
                future.set_exception(ConnectionError(f"connection to {self.peer_address} closed"))
                return
            self._responses[command.opaque] = future
            future.add_done_callback(lambda _: self._loop.call_soon_threadsafe(self._forget, command.opaque))
            self._write(encode(command))

        self._loop.call_soon_threadsafe(send)
        return future

    def _forget(self, opaque: int) -> None:
        self._responses.pop(opaque, None)

    def _answered(self, response: RemotingCommand) -> None:
        future = self._responses.pop(response.opaque, None)
        if future is None:
            log.debug("dropping a response from %s to no request (opaque %d)", self.peer_address, response.opaque)
        elif not future.done():
            future.set_result(response)


TLS_HANDSHAKE = b"\x16"  # a TLS record of type handshake: a ClientHello (a frame's first byte is 0)


@dataclass(frozen=True)
class TlsConfig:
    context: ssl.SSLContext  # the server's: the broker's certificate (services/broker/tls_cert.py)
    required: bool  # tls_mode "tls": plaintext connections are closed


class TlsSession:
    """TLS over a connection whose first bytes were already read (asyncio's start_tls cannot take
    them back): records in, plaintext out, through memory BIOs."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._object = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False

    def receive(self, data: bytes) -> bytes:
        self._incoming.write(data)
        if not self._handshaken:
            try:
                self._object.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self._handshaken = True
        chunks = []
        while True:
            try:
                chunk = self._object.read(1 << 16)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def outgoing(self) -> bytes:
        return self._outgoing.read()

    def encrypt(self, data: bytes) -> bytes:
        self._object.write(data)
        return self._outgoing.read()


def _address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return ""


class RemotingServer:
    """The remoting port: ``start`` binds and runs the loop thread; ``stop`` closes it all."""

    def __init__(
        self,
        dispatcher: Dispatch,
        host: str,
        port: int,
        reuse_port: bool = False,
        group_ports: dict[str, int] | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.tls = tls  # None: plaintext only
        self._host = host
        self._port = port
        self._reuse_port = reuse_port
        self._group_ports = dict(group_ports or {})
        self.group_ports: dict[str, int] = {}  # bound, by broker group
        self.advertised: dict[str, str] = {}  # "host:port" routes name, by broker group ("": the main port)
        self.loop = new_event_loop()
        self.loop_thread_id = 0
        self.channels: set[Channel] = set()
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self.port = 0

    def start(self) -> int:
        """Bind, start serving; the bound main port."""
        sock = listen_socket(self._host, self._port, self._reuse_port)
        self.port = sock.getsockname()[1]
        listeners = [("", sock)]
        for name, port in self._group_ports.items():
            group_sock = listen_socket(self._host, port, self._reuse_port)
            self.group_ports[name] = group_sock.getsockname()[1]
            listeners.append((name, group_sock))
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop_thread_id = threading.get_ident()
            try:
                for name, listening in listeners:
                    self._servers.append(
                        self.loop.run_until_complete(
                            self.loop.create_server(
                                functools.partial(Channel, self, name), sock=listening, backlog=1024
                            )
                        )
                    )
            except OSError as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, name="remoting-loop", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self.port

    def call(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the loop (from any thread)."""
        self.loop.call_soon_threadsafe(function)

    def stop(self, grace_s: float = 1.0) -> None:
        if self._thread is None:
            return
        done = threading.Event()

        def shut() -> None:
            for server in self._servers:
                server.close()
            for channel in list(self.channels):
                channel.close()
            done.set()

        self.loop.call_soon_threadsafe(shut)
        done.wait(grace_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(grace_s + 1.0)
        self._thread = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (the faster one here: bench/remoting_bench.py), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock
