"""A put link to the store over one long-lived ``PutMessagesStream`` instead of a unary
``PutMessages`` per batch (the broker's; ``GrpcStoreClient(put_stream=True)``).

A unary call costs both sides a whole call set-up (~350 µs of server CPU measured on a 2-core
machine, bench/RESULTS.md); a message on an open stream costs a fraction of that. The coalescer
(the broker's ``PutCoalescer``) sends one batch at a time, so the stream is strictly
request, response, request, ...: no correlation ids are needed.

* ``put`` writes the request and reads its response on the calling thread (grpc's own
  thread feeds the request iterator). It holds a lock for the exchange; a caller that finds
  the stream busy (puts without coalescing) makes a unary call instead, so nothing waits.
* A put unanswered after ``timeout_s`` is cancelled by the watchdog, and fails like a unary
  DEADLINE_EXCEEDED (PROXY_TIMEOUT: the outcome is unknown). Any stream error fails the
  put in flight as the unary call would have failed; the next put opens a new stream.
* A store without the method (UNIMPLEMENTED) is remembered: puts go unary from then on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import grpc
from pyrmq.store.v1 import store_pb2 as pb

log = logging.getLogger(__name__)

_END = object()
WATCHDOG_INTERVAL_S = 0.25


class PutStream:
    def __init__(
        self,
        open_stream: Callable[[Any], Any],
        unary: Callable[[pb.PutMessagesRequest], Any],
        timeout_s: float,
        monotonic_s: Callable[[], float],
    ) -> None:
        self._open_stream = open_stream  # stub.PutMessagesStream
        self._unary = unary  # one unary PutMessages (raises grpc.RpcError)
        self._timeout_s = timeout_s
        self._monotonic_s = monotonic_s
        self._lock = threading.Lock()  # one exchange at a time
        self._requests: queue.SimpleQueue[object] | None = None
        self._responses: Any = None
        self._sent_s = 0.0  # when the request in flight was written; 0: none
        self._supported = True
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.streams_opened = 0

    def put(self, request: pb.PutMessagesRequest) -> pb.PutMessagesResponse:
        """The store's answer to ``request``; grpc.RpcError as a unary call would raise."""
        if not self._supported or self._closed.is_set() or not self._lock.acquire(blocking=False):
            return self._unary(request)
        try:
            return self._exchange(request)
        finally:
            self._lock.release()

    def _exchange(self, request: pb.PutMessagesRequest) -> pb.PutMessagesResponse:
        if self._responses is None:
            self._open()
        assert self._requests is not None
        self._sent_s = self._monotonic_s()
        self._requests.put(request)
        try:
            return next(self._responses)
        except StopIteration:  # the store ended the stream without an answer (stopping)
            self._drop()
            raise _StreamEnded() from None
        except grpc.RpcError as exc:
            self._drop()
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                log.info("the store has no PutMessagesStream: unary PutMessages from now on")
                self._supported = False
                return self._unary(request)
            if exc.code() is grpc.StatusCode.CANCELLED and not self._closed.is_set():
                raise _Timeout() from None  # the watchdog cancelled it
            raise
        finally:
            self._sent_s = 0.0

    def _open(self) -> None:
        self._requests = queue.SimpleQueue()
        self._responses = self._open_stream(iter(self._requests.get, _END))
        self.streams_opened += 1
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="put-stream-watchdog", daemon=True)
            self._watchdog.start()

    def _drop(self) -> None:
        if self._requests is not None:
            self._requests.put(_END)
        if self._responses is not None:
            self._responses.cancel()
        self._requests = self._responses = None

    def run_once(self) -> bool:
        """Cancel the stream if its put in flight is overdue; True if it did."""
        sent_s, responses = self._sent_s, self._responses
        if sent_s and responses is not None and self._monotonic_s() - sent_s > self._timeout_s:
            log.warning("store put unanswered after %.1f s: cancelling the put stream", self._timeout_s)
            responses.cancel()
            return True
        return False

    def _watch(self) -> None:
        while not self._closed.wait(WATCHDOG_INTERVAL_S):
            self.run_once()

    def close(self) -> None:
        """Stop streaming: a put in flight fails, later puts go unary (the channel is closing)."""
        self._closed.set()
        requests, responses = self._requests, self._responses
        if requests is not None:
            requests.put(_END)
        if responses is not None:
            responses.cancel()


class _Timeout(grpc.RpcError):
    """A put the watchdog cancelled: reported as a unary call past its deadline."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "no answer on the put stream in time"


class _StreamEnded(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the store ended the put stream"
