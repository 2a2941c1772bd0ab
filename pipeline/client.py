"""A small broker client for the connector's driver and tasks.

Only what the connector needs: ``apache.rocketmq.v2.MessagingService`` QueryRoute,
QueryOffset, PullMessage, SendMessage and UpdateOffset; ``pyrmq.pull.v1.Pull`` PullRecords (raw
CommitLog records; ``RecordsUnsupported`` when the broker does not serve it, e.g. another
RocketMQ 5 proxy, remembered per endpoint); ``pyrmq.admin.v1.Admin`` ListTopics (read-only, for
subscribePattern). One channel per endpoint and process (``_channels``, created lazily: the
reader and writer objects are pickled to the tasks and must not hold a channel; pipeline/README.md,
"Spark's rules" 4). Every call sends ``x-mq-client-id``; a response whose status is not OK
raises ``BrokerCallError`` with the v2 code (both from services/v2client/client.py, the CLI's
client).
Look-ups (route, offsets) are retried ``fetchOffset.numRetries`` times on UNAVAILABLE /
DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import grpc.experimental
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.duration_pb2 import Duration
from pyrmq.admin.v1 import admin_pb2, admin_pb2_grpc
from pyrmq.pull.v1 import pull_pb2, pull_pb2_grpc

from pipeline.errors import RecordsUnsupported
from services.v2client.client import CHANNEL_OPTIONS, BrokerCallError, check, metadata, new_client_id

CLIENT_ID = new_client_id("spark-rocketmq")
LOOKUP_TIMEOUT_S = 30.0
SEND_TIMEOUT_S = 60.0
OK = d.OK
MESSAGE_NOT_FOUND = d.MESSAGE_NOT_FOUND
ILLEGAL_OFFSET = d.ILLEGAL_OFFSET
INTERNAL_SERVER_ERROR = d.INTERNAL_SERVER_ERROR
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()
_READABLE = (d.READ, d.READ_WRITE)
_no_records: set[str] = set()  # endpoints that answered PullRecords with UNIMPLEMENTED


@dataclass(frozen=True)
class RecordsReply:
    """One PullRecords response."""

    code: int
    text: str
    records: bytes  # whole CommitLog records, concatenated
    count: int
    next_offset: int


@dataclass(frozen=True)
class RouteQueue:
    topic: str
    broker: str
    queue_id: int
    endpoint: str  # host:port of the broker serving it


def _stub(endpoint: str) -> s_grpc.MessagingServiceStub:
    return s_grpc.MessagingServiceStub(_channel(endpoint))


def _channel(endpoint: str) -> grpc.Channel:
    channel = _channels.get(endpoint)
    if channel is None:
        with _channels_lock:
            channel = _channels.get(endpoint)
            if channel is None:
                # SingleThreadedUnaryStream: a PullMessage stream is read on the calling thread,
                # not handed over from gRPC's thread per message (measured: ~2x less client CPU).
                channel = _channels[endpoint] = grpc.insecure_channel(
                    endpoint,
                    options=[*CHANNEL_OPTIONS, (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)],
                )
    return channel


def _filter(expression_type: str, expression: str) -> d.FilterExpression:
    return d.FilterExpression(type=d.SQL if expression_type == "SQL92" else d.TAG, expression=expression)


def close_all() -> None:
    _no_records.clear()
    with _channels_lock:
        for channel in _channels.values():
            channel.close()
        _channels.clear()


def _metadata() -> tuple[tuple[str, str], ...]:
    return metadata(CLIENT_ID)


class Client:
    """Calls to one cluster through its access endpoints (the ``endpoints`` option)."""

    def __init__(self, endpoints: tuple[str, ...], retries: int = 3, retry_interval_ms: int = 10) -> None:
        self.endpoints = endpoints
        self.retries = retries
        self.retry_interval_s = retry_interval_ms / 1000

    def _unary(
        self,
        what: str,
        rpc: Callable[[s_grpc.MessagingServiceStub], Callable[..., Any]],
        request: object,
        endpoint: str | None = None,
        timeout_s: float = LOOKUP_TIMEOUT_S,
    ) -> Any:
        """The response of ``rpc`` (a method of the stub it is given), its status checked; retried
        on UNAVAILABLE / DEADLINE_EXCEEDED over ``endpoint`` or every endpoint in turn."""
        targets = [endpoint] if endpoint else list(self.endpoints)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            target = targets[attempt % len(targets)]
            try:
                response = rpc(_stub(target))(request, metadata=_metadata(), timeout=timeout_s)
            except grpc.RpcError as exc:
                if exc.code() not in _RETRIED:
                    raise BrokerCallError(what, d.INTERNAL_SERVER_ERROR, f"{exc.code().name} {exc.details()}") from None
                last = exc
                threading.Event().wait(self.retry_interval_s * (attempt + 1))
                continue
            check(what, response.status)
            return response
        raise BrokerCallError(what, d.INTERNAL_SERVER_ERROR, f"broker unreachable at {targets}: {last}")

    def route(self, topic: str) -> list[RouteQueue]:
        """The readable queues of ``topic``."""
        response = self._unary(
            f"QueryRoute {topic}", lambda stub: stub.QueryRoute, s.QueryRouteRequest(topic=d.Resource(name=topic))
        )
        queues = []
        for mq in response.message_queues:
            if mq.permission not in _READABLE or mq.id < 0:
                continue
            addresses = mq.broker.endpoints.addresses
            endpoint = f"{addresses[0].host}:{addresses[0].port}" if addresses else self.endpoints[0]
            queues.append(RouteQueue(topic, mq.broker.name, mq.id, endpoint))
        return sorted(queues, key=lambda q: (q.topic, q.broker, q.queue_id))

    def query_offset(self, queue: RouteQueue, policy: int, timestamp_ms: int | None = None) -> int:
        # ``policy`` is the enum's number (broker_source's *_POLICY): the stub's type is the enum.
        request = s.QueryOffsetRequest(
            message_queue=_message_queue(queue), query_offset_policy=cast(d.QueryOffsetPolicy, policy)
        )
        if timestamp_ms is not None:
            request.timestamp.seconds = timestamp_ms // 1000
            request.timestamp.nanos = timestamp_ms % 1000 * 1_000_000
        what = f"QueryOffset {d.QueryOffsetPolicy.Name(policy)} {queue.topic}/{queue.broker}/{queue.queue_id}"
        return self._unary(what, lambda stub: stub.QueryOffset, request, queue.endpoint).offset

    def pull(
        self,
        queue: RouteQueue,
        offset: int,
        batch_size: int,
        expression: str,
        timeout_s: float,
        group: str = "spark-rocketmq",
        long_polling_ms: int = 0,
        expression_type: str = "TAG",
    ) -> tuple[int, str, list[d.Message], int]:
        """(status code, status message, messages, next offset) of one PullMessage."""
        request = s.PullMessageRequest(
            group=d.Resource(name=group),
            message_queue=_message_queue(queue),
            offset=offset,
            batch_size=batch_size,
            filter_expression=_filter(expression_type, expression),
        )
        if long_polling_ms:
            request.long_polling_timeout.CopyFrom(
                Duration(seconds=long_polling_ms // 1000, nanos=long_polling_ms % 1000 * 1_000_000)
            )
        code, text, messages, next_offset = d.CODE_UNSPECIFIED, "", [], offset
        try:
            for reply in _stub(queue.endpoint).PullMessage(request, metadata=_metadata(), timeout=timeout_s):
                kind = reply.WhichOneof("content")
                if kind == "message":
                    messages.append(reply.message)
                elif kind == "status":
                    code, text = reply.status.code, reply.status.message
                elif kind == "next_offset":
                    next_offset = reply.next_offset
        except grpc.RpcError as exc:
            raise BrokerCallError(
                f"PullMessage {queue.topic}/{queue.queue_id}@{offset}",
                d.INTERNAL_SERVER_ERROR,
                f"{exc.code().name} {exc.details()}",
            ) from None
        return code, text, messages, next_offset

    def pull_records(
        self,
        queue: RouteQueue,
        offset: int,
        end: int,
        batch_size: int,
        expression_type: str,
        expression: str,
        timeout_s: float,
        max_bytes: int = 0,
    ) -> Generator[RecordsReply, None, None]:
        """The responses of one PullRecords call over ``[offset, end)`` (RecordsReply each).

        RecordsUnsupported when the broker does not serve it (said before any response)."""
        if queue.endpoint in _no_records:
            raise RecordsUnsupported(queue.endpoint)
        request = pull_pb2.PullRecordsRequest(
            topic=queue.topic,
            queue_id=queue.queue_id,
            broker_name=queue.broker,
            queue_offset=offset,
            end_offset=end,
            max_msg_nums=batch_size,
            max_msg_bytes=max_bytes,
            filter_expression=_filter(expression_type, expression),
        )
        what = f"PullRecords {queue.topic}/{queue.queue_id}@{offset}"
        call = pull_pb2_grpc.PullStub(_channel(queue.endpoint)).PullRecords(
            request, metadata=_metadata(), timeout=timeout_s
        )
        try:
            for reply in call:
                yield RecordsReply(
                    reply.status.code, reply.status.message, reply.records, reply.record_count, reply.next_begin_offset
                )
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                _no_records.add(queue.endpoint)
                raise RecordsUnsupported(queue.endpoint) from None
            raise BrokerCallError(what, d.INTERNAL_SERVER_ERROR, f"{exc.code().name} {exc.details()}") from None
        finally:
            call.cancel()  # a reader that stops early ends the stream (a no-op once it ended)

    def list_topics(self) -> list[str]:
        """Every non-system topic (pyrmq.admin.v1.Admin/ListTopics), sorted."""
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            target = self.endpoints[attempt % len(self.endpoints)]
            try:
                response = admin_pb2_grpc.AdminStub(_channel(target)).ListTopics(
                    admin_pb2.ListTopicsRequest(), metadata=_metadata(), timeout=LOOKUP_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                if exc.code() not in _RETRIED:
                    raise BrokerCallError(
                        "ListTopics", d.INTERNAL_SERVER_ERROR, f"{exc.code().name} {exc.details()}"
                    ) from None
                last = exc
                threading.Event().wait(self.retry_interval_s * (attempt + 1))
                continue
            return sorted(t.name for t in response.topics if not t.system)
        raise BrokerCallError("ListTopics", d.INTERNAL_SERVER_ERROR, f"broker unreachable at {self.endpoints}: {last}")

    def send(self, messages: list[d.Message], endpoint: str | None = None) -> list[s.SendResultEntry]:
        response = self._unary(
            f"SendMessage {messages[0].topic.name}",
            lambda stub: stub.SendMessage,
            s.SendMessageRequest(messages=messages),
            endpoint,
            SEND_TIMEOUT_S,
        )
        for entry in response.entries:
            check(f"SendMessage {messages[0].topic.name}", entry.status)
        return list(response.entries)

    def update_offset(self, group: str, queue: RouteQueue, offset: int) -> None:
        self._unary(
            f"UpdateOffset {group} {queue.topic}/{queue.queue_id}",
            lambda stub: stub.UpdateOffset,
            s.UpdateOffsetRequest(group=d.Resource(name=group), message_queue=_message_queue(queue), offset=offset),
            queue.endpoint,
        )


def _message_queue(queue: RouteQueue) -> d.MessageQueue:
    mq = d.MessageQueue(topic=d.Resource(name=queue.topic), id=queue.queue_id)
    mq.broker.name = queue.broker
    return mq
