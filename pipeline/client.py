"""A small ``apache.rocketmq.v2.MessagingService`` client for the connector's driver and tasks.

Only what the connector needs: QueryRoute, QueryOffset, PullMessage, SendMessage and
UpdateOffset, over one channel per endpoint and process (``_channels``, created lazily: the
reader and writer objects are pickled to the tasks and must not hold a channel, spark.md
gotcha 4). Every call sends ``x-mq-client-id``; a response whose status is not OK raises
``BrokerCallError`` with the v2 code (both from services/admin/v2_client.py, the CLI's client).
Look-ups (route, offsets) are retried ``fetchOffset.numRetries`` times on UNAVAILABLE /
DEADLINE_EXCEEDED.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc
import grpc.experimental
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.duration_pb2 import Duration

from services.admin.v2_client import CHANNEL_OPTIONS, BrokerCallError, check, metadata, new_client_id

CLIENT_ID = new_client_id("spark-rocketmq")
LOOKUP_TIMEOUT_S = 30.0
SEND_TIMEOUT_S = 60.0
OK = d.OK
MESSAGE_NOT_FOUND = d.MESSAGE_NOT_FOUND
ILLEGAL_OFFSET = d.ILLEGAL_OFFSET
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()
_READABLE = (d.READ, d.READ_WRITE)


@dataclass(frozen=True)
class RouteQueue:
    topic: str
    broker: str
    queue_id: int
    endpoint: str           # host:port of the broker serving it


def _stub(endpoint: str) -> s_grpc.MessagingServiceStub:
    channel = _channels.get(endpoint)
    if channel is None:
        with _channels_lock:
            channel = _channels.get(endpoint)
            if channel is None:
                # SingleThreadedUnaryStream: a PullMessage stream is read on the calling thread,
                # not handed over from gRPC's thread per message (measured: ~2x less client CPU).
                channel = _channels[endpoint] = grpc.insecure_channel(endpoint, options=[
                    *CHANNEL_OPTIONS, (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)])
    return s_grpc.MessagingServiceStub(channel)


def close_all() -> None:
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

    def _unary(self, what: str, method: str, request, endpoint: str | None = None, timeout_s: float = LOOKUP_TIMEOUT_S):
        targets = [endpoint] if endpoint else list(self.endpoints)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            target = targets[attempt % len(targets)]
            try:
                response = getattr(_stub(target), method)(request, metadata=_metadata(), timeout=timeout_s)
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
        response = self._unary(f"QueryRoute {topic}", "QueryRoute", s.QueryRouteRequest(topic=d.Resource(name=topic)))
        queues = []
        for mq in response.message_queues:
            if mq.permission not in _READABLE or mq.id < 0:
                continue
            addresses = mq.broker.endpoints.addresses
            endpoint = f"{addresses[0].host}:{addresses[0].port}" if addresses else self.endpoints[0]
            queues.append(RouteQueue(topic, mq.broker.name, mq.id, endpoint))
        return sorted(queues, key=lambda q: (q.topic, q.broker, q.queue_id))

    def query_offset(self, queue: RouteQueue, policy: int, timestamp_ms: int | None = None) -> int:
        request = s.QueryOffsetRequest(message_queue=_message_queue(queue), query_offset_policy=policy)
        if timestamp_ms is not None:
            request.timestamp.seconds = timestamp_ms // 1000
            request.timestamp.nanos = timestamp_ms % 1000 * 1_000_000
        what = f"QueryOffset {d.QueryOffsetPolicy.Name(policy)} {queue.topic}/{queue.broker}/{queue.queue_id}"
        return self._unary(what, "QueryOffset", request, queue.endpoint).offset

    def pull(self, queue: RouteQueue, offset: int, batch_size: int, expression: str, timeout_s: float,
             group: str = "spark-rocketmq", long_polling_ms: int = 0) -> tuple[int, str, list[d.Message], int]:
        """(status code, status message, messages, next offset) of one PullMessage."""
        request = s.PullMessageRequest(group=d.Resource(name=group), message_queue=_message_queue(queue),
                                       offset=offset, batch_size=batch_size,
                                       filter_expression=d.FilterExpression(type=d.TAG, expression=expression))
        if long_polling_ms:
            request.long_polling_timeout.CopyFrom(Duration(seconds=long_polling_ms // 1000,
                                                           nanos=long_polling_ms % 1000 * 1_000_000))
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
            raise BrokerCallError(f"PullMessage {queue.topic}/{queue.queue_id}@{offset}", d.INTERNAL_SERVER_ERROR,
                                  f"{exc.code().name} {exc.details()}") from None
        return code, text, messages, next_offset

    def send(self, messages: list[d.Message], endpoint: str | None = None) -> list[s.SendResultEntry]:
        response = self._unary(f"SendMessage {messages[0].topic.name}", "SendMessage",
                               s.SendMessageRequest(messages=messages), endpoint, SEND_TIMEOUT_S)
        for entry in response.entries:
            check(f"SendMessage {messages[0].topic.name}", entry.status)
        return list(response.entries)

    def update_offset(self, group: str, queue: RouteQueue, offset: int) -> None:
        self._unary(f"UpdateOffset {group} {queue.topic}/{queue.queue_id}", "UpdateOffset",
                    s.UpdateOffsetRequest(group=d.Resource(name=group), message_queue=_message_queue(queue),
                                          offset=offset), queue.endpoint)


def _message_queue(queue: RouteQueue) -> d.MessageQueue:
    mq = d.MessageQueue(topic=d.Resource(name=queue.topic), id=queue.queue_id)
    mq.broker.name = queue.broker
    return mq
