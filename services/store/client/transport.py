"""How ``StoreClient`` reaches a store: over gRPC to a store process, or through the store's own
servicer in this process. Both take a method name of ``pyrmq.store.v1.Store`` and a request, and
answer its response or raise the ``StoreError`` its status maps to (``errors.error_for_status``),
so every conversion and every error rule lives once, in ``client.py``.

* ``GrpcTransport``: one channel (thread-safe, calls multiplexed) with a deadline per call;
  puts may go over one long-lived PutMessagesStream (``put_stream.py``).
* ``LocalTransport``: calls ``StoreServicer``'s methods directly with a minimal servicer
  context, so the in-process client runs the very code a store process runs behind gRPC
  (request checks, conversions, error mapping), without a socket.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.runtime.clock import Clock, SystemClock
from services.runtime.rpc.health import NotServingError, wait_serving
from services.runtime.rpc.tls import TlsFiles, open_channel
from services.store.client.errors import StoreError, StoreUnavailableError, error_for_status
from services.store.client.put_stream import PutStream

STORE_SERVICE = "pyrmq.store.v1.Store"


class Stream(Protocol):
    """A server-streaming call in progress: iterate its responses; ``cancel`` ends it."""

    def __iter__(self) -> Iterator[Any]: ...
    def cancel(self) -> bool | None: ...


class Transport(Protocol):
    @property
    def address(self) -> str: ...

    @property
    def failing_over(self) -> bool:
        """A call is waiting for a new master (master.MasterTransport); False for one store."""

    @property
    def failovers(self) -> int:
        """Calls retried on a (new) master so far; 0 for one store."""

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """One unary call; the ``StoreError`` of its status if it fails."""

    def put(self, request: pb.PutMessagesRequest, timeout_s: float | None = None) -> pb.PutMessagesResponse:
        """One PutMessages (over the put stream when there is one); ``timeout_s`` bounds
        waiting for a master to put it on (a transport that follows one: MasterTransport)."""

    def stream(self, method: str, request: Any) -> Stream:
        """Open a server-streaming call; iterating it raises ``StoreError`` if it fails."""

    def wait_ready(self, timeout_s: float, give_up: Callable[[], bool], clock: Clock) -> bool: ...
    def close(self) -> None: ...


def _failed(exc: grpc.RpcError, what: str) -> StoreError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return error_for_status(code, details or "", what)


def _closed(exc: ValueError) -> StoreUnavailableError:
    return StoreUnavailableError(f"store client closed: {exc}")


class _GrpcStream:
    """A gRPC server stream whose failures surface as ``StoreError``."""

    def __init__(self, call: Any, method: str) -> None:
        self._call = call
        self._method = method

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self._call
        except grpc.RpcError as exc:
            raise _failed(exc, self._method) from None
        except ValueError as exc:  # the channel was closed under the stream
            raise _closed(exc) from None

    def cancel(self) -> bool | None:
        return self._call.cancel()


class GrpcTransport:
    failing_over = False  # one store: no master to wait for
    failovers = 0

    def __init__(
        self,
        address: str,
        rpc_timeout_s: float = 5.0,
        tls: TlsFiles | None = None,
        put_stream: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.address = address
        self._timeout_s = rpc_timeout_s
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.StoreStub(self._channel)
        unary_put = self._stub.PutMessages
        timeout_s = rpc_timeout_s
        self._put: Callable[[pb.PutMessagesRequest], Any] = lambda request: unary_put(request, timeout=timeout_s)
        self.put_stream: PutStream | None = None
        if put_stream:
            self.put_stream = PutStream(
                self._stub.PutMessagesStream, self._put, rpc_timeout_s, (clock or SystemClock()).monotonic_s
            )
            self._put = self.put_stream.put

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=self._timeout_s if timeout_s is None else timeout_s)
        except grpc.RpcError as exc:
            raise _failed(exc, method) from None
        except ValueError as exc:  # grpc: the channel is closed (the caller is stopping)
            raise _closed(exc) from None

    def put(self, request: pb.PutMessagesRequest, timeout_s: float | None = None) -> pb.PutMessagesResponse:
        try:  # one store, no master to wait for: the call's own rpc timeout bounds it
            return self._put(request)
        except grpc.RpcError as exc:
            raise _failed(exc, "PutMessages") from None
        except ValueError as exc:
            raise _closed(exc) from None

    def stream(self, method: str, request: Any) -> Stream:
        try:
            return _GrpcStream(getattr(self._stub, method)(request, wait_for_ready=True), method)
        except ValueError as exc:
            raise _closed(exc) from None

    def wait_ready(self, timeout_s: float, give_up: Callable[[], bool], clock: Clock) -> bool:
        try:
            return wait_serving(self._channel, STORE_SERVICE, timeout_s, clock.monotonic_s, give_up)
        except NotServingError as exc:
            raise StoreUnavailableError(f"store at {self.address} {exc}") from None
        except ValueError as exc:  # closed under the wait: the master changed (the view closes its channel)
            raise _closed(exc) from None

    def close(self) -> None:
        if self.put_stream is not None:
            self.put_stream.close()
        self._channel.close()


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _LocalContext:
    """The part of ``grpc.ServicerContext`` the store servicer uses."""

    def __init__(self) -> None:
        self._active = True
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)

    def is_active(self) -> bool:
        return self._active

    def add_callback(self, callback: Callable[[], None]) -> bool:
        with self._lock:
            self._callbacks.append(callback)
        return True

    def cancel(self) -> None:
        with self._lock:
            self._active, callbacks, self._callbacks = False, self._callbacks, []
        for callback in callbacks:
            callback()


class _LocalStream:
    def __init__(self, responses: Iterator[Any], context: _LocalContext, method: str) -> None:
        self._responses = responses
        self._context = context
        self._method = method

    def __iter__(self) -> Iterator[Any]:
        try:
            for response in self._responses:
                if not self._context.is_active():
                    return
                yield response
        except _Aborted as exc:
            raise error_for_status(exc.code, exc.details, self._method) from None
        if not self._context.is_active():
            raise StoreUnavailableError(f"store failed {self._method}: CANCELLED", grpc.StatusCode.CANCELLED.name)

    def cancel(self) -> bool:
        self._context.cancel()
        return True


class LocalTransport:
    """The store servicer called in this process (``StoreServicer`` over a ``FileStore``)."""

    address = "in-process"
    failing_over = False
    failovers = 0

    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("store client closed: in-process transport")

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        self._check_open()
        try:
            return getattr(self._servicer, method)(request, _LocalContext())
        except _Aborted as exc:
            raise error_for_status(exc.code, exc.details, method) from None

    def put(self, request: pb.PutMessagesRequest, timeout_s: float | None = None) -> pb.PutMessagesResponse:
        return self.call("PutMessages", request)

    def stream(self, method: str, request: Any) -> Stream:
        self._check_open()
        context = _LocalContext()
        return _LocalStream(iter(getattr(self._servicer, method)(request, context)), context, method)

    def wait_ready(self, timeout_s: float, give_up: Callable[[], bool], clock: Clock) -> bool:
        self._check_open()
        return True

    def close(self) -> None:
        self._closed = True
        self._servicer.close()
