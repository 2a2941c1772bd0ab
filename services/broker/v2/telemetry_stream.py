"""One Telemetry call (bidirectional stream) on the synchronous gRPC server.

The handler's generator is the writer: it yields whatever lands in the stream's outbound
queue. A reader thread consumes the client's commands and answers each Settings command by
putting the merged settings into that queue; anyone holding the client's ``ClientSession``
can ``push`` a server command (RecoverOrphanedTransactionCommand, ...) the same way; the
reader hands a client's ThreadStackTrace / VerifyMessageResult to whoever waits for its nonce
(``TelemetryService.answered``). The
stream stays open until the client cancels or half-closes it, or the server stops
(never end it after replying: Node reconnects every second, Py stops reading; docs/v2-clients.md,
pitfall 4).

Threads: each open stream holds one gRPC worker (the generator) and one reader thread, hence
``BrokerConfig.telemetry_streams_max``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from apache.rocketmq.v2 import service_pb2 as s

from services.broker.errors import FAILURES, Code, RequestError, as_broker_error
from services.broker.telemetry import ClientAnswer, ClientFacts, ClientSession, TelemetryService
from services.broker.v2 import convert
from services.broker.v2.status import DIRECT, Peers, peer_address, status
from services.store.client.errors import StoreRejectedError

log = logging.getLogger(__name__)

LIVENESS_POLL_S = 1.0  # how often an idle stream checks that its call is still active
_END = object()


@dataclass(frozen=True)
class _Abort:
    code: grpc.StatusCode
    details: str


class TelemetryStream:
    def __init__(self) -> None:
        self._outbound: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False

    def push(self, command: Any) -> bool:
        """Queue a command for the client; False once the stream has ended."""
        if self._closed:
            return False
        self._outbound.put(command)
        return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbound.put(_END)

    def take(self, timeout_s: float) -> Any:
        try:
            return self._outbound.get(timeout=timeout_s)
        except queue.Empty:
            return None


class TelemetryStreams:
    """The open streams, bounded; ``close_all`` ends them before the server stops."""

    def __init__(self, service: TelemetryService, streams_max: int, peers: Peers = DIRECT) -> None:
        self._service = service
        self._peers = peers
        self._streams_max = streams_max
        self._lock = threading.Lock()
        self._open: set[TelemetryStream] = set()

    def close_all(self) -> None:
        with self._lock:
            streams = list(self._open)
        for stream in streams:
            stream.close()

    def serve(
        self, client_id: str, request_iterator: Iterator[s.TelemetryCommand], context: grpc.ServicerContext
    ) -> Iterator[s.TelemetryCommand]:
        if not client_id:
            yield s.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is required"))
            return
        stream = TelemetryStream()
        with self._lock:
            if len(self._open) >= self._streams_max:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {self._streams_max} telemetry streams are served"
                )
            self._open.add(stream)
        session = self._service.open_session(client_id, stream.push, client_facts(context, self._peers))
        context.add_callback(stream.close)  # cancelled, deadline, or server stopping
        reader = threading.Thread(
            target=self._read, args=(request_iterator, stream, session), name=f"telemetry-{client_id[:40]}", daemon=True
        )
        reader.start()
        try:
            while True:
                item = stream.take(LIVENESS_POLL_S)
                if item is None:
                    if not context.is_active():
                        return
                    continue
                if item is _END:
                    return
                if isinstance(item, _Abort):
                    context.abort(item.code, item.details)
                yield item
        finally:
            stream.close()
            self._service.close_session(session)
            with self._lock:
                self._open.discard(stream)

    def _read(
        self, request_iterator: Iterator[s.TelemetryCommand], stream: TelemetryStream, session: ClientSession
    ) -> None:
        try:
            for command in request_iterator:
                self._on_command(command, stream, session)
        except grpc.RpcError:
            pass  # the call ended (cancelled by the client, or the server stopping)
        except Exception:  # a bug: end this stream, keep the server
            log.exception("telemetry stream of %s failed", session.client_id)
        finally:
            stream.close()

    def _on_command(self, command: s.TelemetryCommand, stream: TelemetryStream, session: ClientSession) -> None:
        which = command.WhichOneof("command")
        if which != "settings":
            answer = client_answer(command)
            if answer is None or not self._service.answered(*answer):
                log.debug("telemetry command %s from %s ignored", which, session.client_id)
            return
        settings = convert.client_settings(command.settings)
        try:
            server_settings = self._service.settings_for(settings)
        except (
            RequestError,
            StoreRejectedError,
        ) as exc:  # neither publishing nor subscription: the proxy closes the call
            stream.push(_Abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message))
            return
        except FAILURES as caught:  # the store did not answer: a status-only reply, clients retry later
            error = as_broker_error(caught)
            log.warning("settings for %s failed: %s", session.client_id, error.message)
            stream.push(s.TelemetryCommand(status=status(error.code, error.message)))
            return
        self._service.apply_settings(session, settings)
        stream.push(convert.settings_reply(command.settings, server_settings))


def client_facts(context: grpc.ServicerContext, peers: Peers) -> ClientFacts:
    """The x-mq-language / x-mq-client-version headers and the client's address."""
    headers = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
    return ClientFacts(
        language=headers.get("x-mq-language", "")[:32],
        version=headers.get("x-mq-client-version", "")[:64],
        address=peer_address(context, peers),
    )


def client_answer(command: s.TelemetryCommand) -> tuple[str, ClientAnswer] | None:
    """(nonce, answer) of a ThreadStackTrace or VerifyMessageResult; None for anything else.
    The Node.js client answers a VerifyMessageCommand it does not implement by echoing the
    command (nonce and NOT_IMPLEMENTED status): taken as an answer too."""
    which = command.WhichOneof("command")
    code, message = command.status.code, command.status.message
    if which == "thread_stack_trace":
        trace = command.thread_stack_trace
        return trace.nonce, ClientAnswer(code, message, trace.thread_stack_trace)
    if which == "verify_message_result":
        return command.verify_message_result.nonce, ClientAnswer(code, message)
    if which == "verify_message_command" and command.verify_message_command.nonce:
        return command.verify_message_command.nonce, ClientAnswer(code, message)
    return None
