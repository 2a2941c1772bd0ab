"""A small synchronous ``apache.rocketmq.v2.MessagingService`` client, for trying a topic by
hand: ``pyrmq send``, ``pyrmq consume`` and ``pyrmq bench`` (``services/admin/client_cli.py``,
``bench_cli.py``). pipeline/client.py (the Spark connector's pull client) shares its status
check, error type and call metadata.

    with V2Client("127.0.0.1:8081") as client:
        client.route("TopicA")                                  # QueryRoute: the topic's queues
        [entry] = client.send([build_message("TopicA", b"hi", tag="TagA", keys=["order-1"])])
        messages = client.receive("GroupA", "TopicA", "TagA || TagB", wait_s=5)
        client.ack("GroupA", "TopicA", messages)

What the broker needs from a client (as the official clients do it: docs/v2-clients.md):

* every call carries ``x-mq-client-id`` (else CLIENT_ID_REQUIRED), plus ``x-mq-language`` and
  ``x-mq-protocol`` as the official clients send them;
* a sent message has a non-blank ``message_id``: ``new_message_id()`` makes the official
  clients' V1 ids (34 uppercase hex digits: version 01, MAC, pid, seconds since 2021-01-01,
  a per-process sequence); ``body_encoding`` IDENTITY; a ``message_type`` that agrees with its
  fields (FIFO with a message group, DELAY with a delivery timestamp, else NORMAL);
  ``born_timestamp``. ``born_host`` is left empty: the broker then records the address it
  sees the call come from. Clients never set ``body_digest`` on send;
* a receive has an ``invisible_duration`` (the broker accepts 10 s to 12 h) and a gRPC deadline
  at least 5 s away (the broker's shortest long polling, else ILLEGAL_POLLING_TIME): the
  deadline is the long-polling time plus ``timeout_s``. The stream is read to its end: a
  status element (MESSAGE_NOT_FOUND when nothing came), the messages, a delivery timestamp.

Errors: a response whose status is not OK (or MULTIPLE_RESULTS) raises ``BrokerCallError``
carrying the v2 code (``d.Code``); a broker that cannot be reached or does not answer raises
the ``grpc.RpcError`` as it came (UNAVAILABLE, DEADLINE_EXCEEDED), so callers can tell the two
apart.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import itertools
import os
import socket
import threading
import time
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from services.runtime.rpc.tls import read_tls_file

DEFAULT_TIMEOUT_S = 10.0
# No gRPC size limit on our side: the broker's own (a 4 MiB body plus headers) is what counts.
# A broker that stops answering (a paused or hung process: its kernel keeps the TCP connection
# up) is found within KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS by HTTP/2 pings: its calls fail
# and the channel connects again, to another broker of a target of several ("ipv4:a:8081,b:8081":
# gRPC's pick_first tries the next address while one does not answer). The broker permits pings
# this often (services/broker/v2/server.py). Not round_robin: one consumer's receives and acks
# spread over two brokers were seen to deliver a message twice and refuse an ack of it as
# INVALID_RECEIPT_HANDLE (tests/faults/test_hosts_faults.py's link delay, 3 runs of 10).
KEEPALIVE_TIME_MS = 1000  # found within 1-2 s: a paused broker's clients fail over well inside 5 s
KEEPALIVE_TIMEOUT_MS = 1000
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),  # the ack's wait: without it gRPC 1.85 waits 1 min (checked)
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),  # a long poll sends no data for up to 20 s
)
LONG_POLLING_S_MIN = 5  # the broker raises a shorter long-polling time to this
LONG_POLLING_S_MAX = 20  # and cuts a longer one to this
RECEIVE_BATCH_MAX = 32  # messages per ReceiveMessage at most (the broker's limit)
_SUCCESS = (d.OK, d.MULTIPLE_RESULTS)  # MULTIPLE_RESULTS: every entry has its own status
_V1_EPOCH_S = 1_609_459_200  # 2021-01-01T00:00:00Z, the V1 message id's time origin


class BrokerCallError(RuntimeError):
    """The broker answered a non-OK v2 status (``code``: an ``apache.rocketmq.v2.Code``).

    pipeline/client.py also raises it, as INTERNAL_SERVER_ERROR, for a broker it could not reach.
    """

    def __init__(self, what: str, code: int, message: str) -> None:
        name = d.Code.Name(code) if code in d.Code.values() else str(code)
        super().__init__(f"{what}: {name} ({code}) {message}")
        self.code = code
        self.status_message = message


def check(what: str, status: d.Status) -> None:
    """Raise ``BrokerCallError`` unless ``status`` is OK."""
    if status.code != d.OK:
        raise BrokerCallError(what, status.code, status.message)


def metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    """The headers every call carries (the official clients' names; the broker requires the client id)."""
    return (("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))


@dataclass(frozen=True)
class Credentials:
    """An access key (the username) and secret key: every call is signed as the official
    clients sign (``authorization: MQv2-HMAC-SHA1 ...`` over ``x-mq-date-time``, UTC)."""

    access_key: str = ""
    secret_key: str = ""

    def headers(self) -> tuple[tuple[str, str], ...]:
        if not self.access_key:
            return ()
        date_time = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        signature = hmac.new(self.secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
        return (
            ("x-mq-date-time", date_time),
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential={self.access_key}, SignedHeaders=x-mq-date-time, Signature={signature}",
            ),
        )


Continuation = Callable[[grpc.ClientCallDetails, Any], Any]  # grpcio's, untyped: (details, request) -> call


class _Signing(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds fresh signed headers to every call."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            (*(details.metadata or ()), *self._credentials.headers()),
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Continuation, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Continuation, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Continuation, details: grpc.ClientCallDetails, request_iterator: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(
        self, continuation: Continuation, details: grpc.ClientCallDetails, request_iterator: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), request_iterator)


class _CallDetails(typing.NamedTuple):
    method: str
    timeout: float | None
    metadata: tuple[tuple[str, str], ...]
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


def open_channel(
    endpoint: str,
    credentials: Credentials | None = None,
    tls: bool = False,
    ca_file: str | None = None,
    options: typing.Sequence[tuple[str, typing.Any]] = CHANNEL_OPTIONS,
) -> grpc.Channel:
    """A channel to ``endpoint``: TLS when asked (the system's roots, or ``ca_file``), every call
    signed when ``credentials`` has an access key."""
    if tls:
        roots = read_tls_file(ca_file or "")
        channel = grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(roots), options=list(options))
    else:
        channel = grpc.insecure_channel(endpoint, options=list(options))
    if credentials is not None and credentials.access_key:
        channel = grpc.intercept_channel(channel, _Signing(credentials))
    return channel


def new_client_id(kind: str) -> str:
    """``host@pid@kind@random``: the official clients' shape (hostname@pid@index@time)."""
    return f"{socket.gethostname()}@{os.getpid()}@{kind}@{uuid.uuid4().hex[:8]}"


class _MessageIds:
    """V1 message ids, as the official clients make them: 01, MAC(6), pid(2), seconds since 2021(4), sequence(4)."""

    def __init__(self) -> None:
        seconds = (int(time.time()) - _V1_EPOCH_S) & 0xFFFF_FFFF
        prefix = b"\x01" + uuid.getnode().to_bytes(6, "big") + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._prefix = (prefix + seconds.to_bytes(4, "big")).hex().upper()
        self._sequence = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            sequence = next(self._sequence) & 0xFFFF_FFFF
        return f"{self._prefix}{sequence:08X}"


_message_ids = _MessageIds()


def new_message_id() -> str:
    """A fresh V1 message id, unique in this process (34 uppercase hex digits)."""
    return _message_ids.next()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


def timestamp_ms(value: Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def build_message(
    topic: str,
    body: bytes,
    *,
    tag: str | None = None,
    keys: Iterable[str] = (),
    properties: dict[str, str] | None = None,
    message_group: str | None = None,
    delivery_timestamp_ms: int | None = None,
    message_id: str | None = None,
    born_timestamp_ms: int | None = None,
    priority: int | None = None,
) -> d.Message:
    """One message as the official clients send it: NORMAL, FIFO (``message_group``), DELAY
    (``delivery_timestamp_ms``) or PRIORITY (``priority``); the broker refuses a group with a
    delivery time, and drops a priority beside either."""
    sp = d.SystemProperties(message_id=message_id or new_message_id(), body_encoding=d.IDENTITY, keys=list(keys))
    if tag:
        sp.tag = tag
    sp.born_timestamp.CopyFrom(timestamp(born_timestamp_ms if born_timestamp_ms is not None else now_ms()))
    if message_group is not None:
        sp.message_group = message_group
        sp.message_type = d.FIFO
    elif delivery_timestamp_ms is not None:
        sp.delivery_timestamp.CopyFrom(timestamp(delivery_timestamp_ms))
        sp.message_type = d.DELAY
    elif priority is not None:
        sp.priority = priority
        sp.message_type = d.PRIORITY
    else:
        sp.message_type = d.NORMAL
    message = d.Message(topic=d.Resource(name=topic), system_properties=sp, body=body)
    if properties:
        message.user_properties.update(properties)
    return message


def long_polling_s(wait_s: float) -> float:
    """The long-polling time the broker will use for a wish of ``wait_s``."""
    return min(max(wait_s, LONG_POLLING_S_MIN), LONG_POLLING_S_MAX)


def receive_request(
    group: str,
    topic: str,
    expression: str = "*",
    *,
    sql: bool = False,
    batch_size: int = RECEIVE_BATCH_MAX,
    invisible_s: float = 30.0,
    wait_s: float = LONG_POLLING_S_MIN,
    queue: d.MessageQueue | None = None,
) -> s.ReceiveMessageRequest:
    """A SimpleConsumer's ReceiveMessage. The broker pops from every queue of the topic (and the
    group's retry topic) whichever ``queue`` names."""
    invisible_ms, polling_ms = round(invisible_s * 1000), round(long_polling_s(wait_s) * 1000)
    message_queue = d.MessageQueue()
    if queue is not None:
        message_queue.CopyFrom(queue)
    else:
        message_queue.topic.name, message_queue.id = topic, -1
    return s.ReceiveMessageRequest(
        group=d.Resource(name=group),
        message_queue=message_queue,
        filter_expression=d.FilterExpression(type=d.SQL if sql else d.TAG, expression=expression),
        batch_size=batch_size,
        auto_renew=False,
        invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=invisible_ms % 1000 * 1_000_000),
        long_polling_timeout=Duration(seconds=polling_ms // 1000, nanos=polling_ms % 1000 * 1_000_000),
    )


def receive_deadline_s(request: s.ReceiveMessageRequest, timeout_s: float) -> float:
    """The gRPC deadline of a receive: its long polling, plus ``timeout_s`` for the rest."""
    polling = request.long_polling_timeout
    return polling.seconds + polling.nanos / 1e9 + timeout_s


def received(what: str, responses: Iterable[s.ReceiveMessageResponse]) -> list[d.Message]:
    """The messages of a whole ReceiveMessage stream; BrokerCallError for an error status
    (MESSAGE_NOT_FOUND, the empty answer after long polling, is no error)."""
    messages: list[d.Message] = []
    for response in responses:
        kind = response.WhichOneof("content")
        if kind == "message":
            messages.append(response.message)
        elif kind == "status" and response.status.code not in (d.OK, d.MESSAGE_NOT_FOUND):
            raise BrokerCallError(what, response.status.code, response.status.message)
    return messages


def ack_request(group: str, topic: str, messages: Sequence[d.Message]) -> s.AckMessageRequest:
    return s.AckMessageRequest(
        group=d.Resource(name=group),
        topic=d.Resource(name=topic),
        entries=[
            s.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
            )
            for m in messages
        ],
    )


def check_entries(what: str, response: s.SendMessageResponse | s.AckMessageResponse) -> None:
    """The top-level status, then each entry's (a MULTIPLE_RESULTS answer hides failed entries)."""
    if response.status.code not in _SUCCESS:
        raise BrokerCallError(what, response.status.code, response.status.message)
    for entry in response.entries:
        check(what, entry.status)


class V2Client:
    """Calls to one broker over one channel. Use as a context manager (closes the channel)."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client_id: str | None = None,
        credentials: Credentials | None = None,
        tls: bool = False,
        ca_file: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.client_id = client_id or new_client_id("pyrmq-cli")
        self.metadata = metadata(self.client_id)
        self.channel = open_channel(endpoint, credentials, tls, ca_file)
        self.stub = s_grpc.MessagingServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> V2Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def route(self, topic: str) -> list[d.MessageQueue]:
        """QueryRoute: the topic's queues (TOPIC_NOT_FOUND when it does not exist and the broker
        does not create topics on demand)."""
        response = self.stub.QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=self.metadata, timeout=self.timeout_s
        )
        check(f"QueryRoute {topic}", response.status)
        return list(response.message_queues)

    def send(self, messages: Sequence[d.Message]) -> list[s.SendResultEntry]:
        """SendMessage (one topic; the broker puts the whole request on one queue): one entry per
        message, each OK, else BrokerCallError."""
        response = self.stub.SendMessage(
            s.SendMessageRequest(messages=messages), metadata=self.metadata, timeout=self.timeout_s
        )
        check_entries(f"SendMessage {messages[0].topic.name}", response)
        return list(response.entries)

    def receive(
        self,
        group: str,
        topic: str,
        expression: str = "*",
        *,
        sql: bool = False,
        batch_size: int = RECEIVE_BATCH_MAX,
        invisible_s: float = 30.0,
        wait_s: float = LONG_POLLING_S_MIN,
        queue: d.MessageQueue | None = None,
    ) -> list[d.Message]:
        """One ReceiveMessage: up to ``batch_size`` messages, waiting up to ``wait_s`` (5-20 s,
        the broker's bounds) for the first; [] when nothing came."""
        request = receive_request(
            group,
            topic,
            expression,
            sql=sql,
            batch_size=batch_size,
            invisible_s=invisible_s,
            wait_s=wait_s,
            queue=queue,
        )
        return received(
            f"ReceiveMessage {group} {topic}",
            self.stub.ReceiveMessage(
                request, metadata=self.metadata, timeout=receive_deadline_s(request, self.timeout_s)
            ),
        )

    def ack(self, group: str, topic: str, messages: Sequence[d.Message]) -> None:
        """AckMessage for all ``messages`` in one request; BrokerCallError if any entry failed
        (INVALID_RECEIPT_HANDLE: its invisible time had ended)."""
        if not messages:
            return
        response = self.stub.AckMessage(
            ack_request(group, topic, messages), metadata=self.metadata, timeout=self.timeout_s
        )
        check_entries(f"AckMessage {group} {topic}", response)
