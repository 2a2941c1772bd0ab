"""A loopback TCP proxy for fault tests: ``TcpProxy(upstream)`` listens on 127.0.0.1:0 and
forwards every connection to ``upstream`` (host:port), one thread per direction.

- ``cut()`` closes every open connection (both sides) and refuses new ones (accepted, then
  closed at once, so the peer sees a reset rather than a hang) until ``restore()``.
- ``delay_ms`` (settable at any time) holds each chunk read in either direction that long
  before it is forwarded, in order; a ``cut()`` drops what is being held.

Used as ``with TcpProxy(address) as proxy:``; ``close()`` stops listening and closes all.
"""

from __future__ import annotations

import contextlib
import socket
import threading

CHUNK_BYTES = 64 * 1024
ACCEPT_POLL_S = 0.05


class TcpProxy:
    def __init__(self, upstream: str, delay_ms: int = 0) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.delay_ms = delay_ms
        self.accepted = 0  # connections forwarded (not counting refused ones)
        self.refused = 0  # connections closed at once while cut
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cut = threading.Event()  # set while cut: held chunks are dropped
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(ACCEPT_POLL_S)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every connection and refuse new ones until ``restore()``."""
        self._cut.set()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            _close(conn)

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._thread.join(5)
        self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut.is_set():
                self.refused += 1
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._cut.is_set():
                    _close(client)
                    _close(server)
                    continue
                self._conns.update((client, server))
                self.accepted += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="tcp-proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(CHUNK_BYTES)
                if not data:
                    break
                delay_s = self.delay_ms / 1000
                if delay_s > 0 and self._cut.wait(delay_s):
                    break  # cut while held: the chunk is dropped
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
