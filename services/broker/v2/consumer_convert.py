"""``apache.rocketmq.v2`` protobuf <-> consumer core (``services/broker/consumer.py``).

Delivered messages (the proxy's ``GrpcConverter.buildMessage``): MD5 uppercase hex body digest,
body encoding IDENTITY (GZIP for a compressed record: zlib re-wrapped, LZ4 and ZSTD inflated; services/domain/compression.py), delivery_attempt >= 1,
receipt handle, queue id / offset; user properties: every stored property but
``services.domain.delivery.HIDDEN_PROPERTY_KEYS`` (``__SHARDINGKEY`` and ``__transactionId__``
pass through, as from the proxy).
"""

from __future__ import annotations

import hashlib
from typing import cast

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf import timestamp_pb2
from google.protobuf.duration_pb2 import Duration

from services.broker import consumer
from services.broker.consumer import FilterType, ReceiveRequest
from services.broker.errors import Code, RequestError
from services.broker.lite_consumer import OffsetKind, OffsetOption
from services.broker.route import Route
from services.broker.v2.convert import route_response
from services.broker.v2.status import OK_STATUS, status
from services.domain.compression import plain_body
from services.domain.delivery import MessageType, delivered_message_type, delivery_timestamp_ms, user_properties
from services.domain.format.properties_format import (
    BORN_HOST,
    DLQ_ORIGIN_MESSAGE_ID,
    DLQ_ORIGIN_TOPIC,
    LITE_TOPIC,
    SHARDING_KEY,
    TAGS,
    TRACE_CONTEXT,
)
from services.domain.topic_types import message_priority
from services.store.client.model import Delivery

# An LZ4 or ZSTD body (remoting producers) is inflated for v2 consumers up to this; beyond, it
# goes as stored (the client then reports it).
PLAIN_BODY_MAX_BYTES = 64 << 20
_FILTER_TYPES = {d.TAG: FilterType.TAG, d.SQL: FilterType.SQL, d.FILTER_TYPE_UNSPECIFIED: FilterType.TAG}


def _duration_ms(value: Duration, what: str, code: Code) -> int:
    if value.seconds < 0 or value.nanos < 0:
        raise RequestError(f"{what} must not be negative", code)
    return value.seconds * 1000 + value.nanos // 1_000_000


def receive_request(request: s.ReceiveMessageRequest, deadline_remaining_s: float | None) -> ReceiveRequest:
    expression = request.filter_expression
    filter_type = _FILTER_TYPES.get(expression.type)
    if filter_type is None:
        raise RequestError(f"unknown filter type {expression.type}", Code.ILLEGAL_FILTER_EXPRESSION)
    return ReceiveRequest(
        group=request.group.name,
        topic=request.message_queue.topic.name,
        filter_type=filter_type,
        filter_expression=expression.expression if request.HasField("filter_expression") else "*",
        batch_size=request.batch_size,
        invisible_ms=(
            _duration_ms(request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME)
            if request.HasField("invisible_duration")
            else None
        ),
        auto_renew=request.auto_renew,
        long_polling_ms=(
            _duration_ms(request.long_polling_timeout, "long_polling_timeout", Code.ILLEGAL_POLLING_TIME)
            if request.HasField("long_polling_timeout")
            else None
        ),
        deadline_remaining_ms=None if deadline_remaining_s is None else int(deadline_remaining_s * 1000),
        broker_name=request.message_queue.broker.name if request.message_queue.HasField("broker") else "",
    )


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


def delivered_message(delivery: Delivery) -> d.Message:
    props = delivery.properties
    body, gzipped = plain_body(delivery.body, delivery.sys_flag, PLAIN_BODY_MAX_BYTES)
    out = d.Message(topic=d.Resource(name=delivery.topic), body=body)
    out.user_properties.update(user_properties(props))
    sp = out.system_properties
    if TAGS in props:
        sp.tag = props[TAGS]
    sp.keys.extend(consumer.keys_of(props))
    sp.message_id = consumer.message_id(delivery)
    sp.body_digest.type = d.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = d.GZIP if gzipped else d.IDENTITY
    message_type = delivered_message_type(props)
    sp.message_type = cast(d.MessageType, int(message_type))  # the stub's type is the proto's enum class
    if message_type is MessageType.PRIORITY and (priority := message_priority(props)) is not None:
        sp.priority = priority
    elif message_type is MessageType.LITE:
        sp.lite_topic = props[LITE_TOPIC]
    sp.born_timestamp.CopyFrom(timestamp(delivery.born_timestamp_ms))
    born_host = props.get(BORN_HOST)
    if not born_host or born_host.isspace():  # the proxy takes the record's host for a blank one
        born_host = delivery.born_host
    if born_host and not born_host.isspace():
        sp.born_host = born_host
    sp.store_timestamp.CopyFrom(timestamp(delivery.store_timestamp_ms))
    sp.store_host = delivery.store_host
    deliver_at = delivery_timestamp_ms(props, delivery.store_timestamp_ms)
    if deliver_at is not None:
        sp.delivery_timestamp.CopyFrom(timestamp(deliver_at))
    sp.receipt_handle = delivery.receipt_handle
    sp.queue_id = delivery.queue_id
    sp.queue_offset = delivery.queue_offset
    sp.delivery_attempt = max(1, delivery.delivery_attempt)
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in props and DLQ_ORIGIN_MESSAGE_ID in props:
        sp.dead_letter_queue.topic = props[DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props[DLQ_ORIGIN_MESSAGE_ID]
    return out


def receive_responses(messages: list[Delivery], now_ms: int) -> list[s.ReceiveMessageResponse]:
    if messages:
        head = [s.ReceiveMessageResponse(status=OK_STATUS)]
        head += [s.ReceiveMessageResponse(message=delivered_message(m)) for m in messages]
    else:
        head = [s.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))]
    return head + [s.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms))]


def receive_error(code: int, message: str, now_ms: int) -> list[s.ReceiveMessageResponse]:
    return [
        s.ReceiveMessageResponse(status=status(code, message)),
        s.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms)),
    ]


def ack_response(request: s.AckMessageRequest, results: list[tuple[Code, str]]) -> s.AckMessageResponse:
    codes = {code for code, _ in results}
    if len(codes) == 1:
        [(code, message)] = results[:1]
        top = status(code, message)
    elif not codes:
        top = OK_STATUS
    else:
        top = status(Code.MULTIPLE_RESULTS, "entries have different results")
    return s.AckMessageResponse(
        status=top,
        entries=[
            s.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status(code, message)
            )
            for entry, (code, message) in zip(request.entries, results)
        ],
    )


def change_invisible_ms(request: s.ChangeInvisibleDurationRequest) -> int:
    return _duration_ms(request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME)


def assignment_response(topic: d.Resource, route: Route) -> s.QueryAssignmentResponse:
    queues = route_response(topic, route).message_queues
    return s.QueryAssignmentResponse(status=OK_STATUS, assignments=[d.Assignment(message_queue=q) for q in queues])


_OFFSET_POLICIES = {
    d.OffsetOption.LAST: OffsetKind.LAST,
    d.OffsetOption.MIN: OffsetKind.MIN,
    d.OffsetOption.MAX: OffsetKind.MAX,
}


def offset_option(request: s.SyncLiteSubscriptionRequest) -> OffsetOption | None:
    """A SyncLiteSubscription's offset option (None: absent)."""
    if not request.HasField("offset_option"):
        return None
    option = request.offset_option
    which = option.WhichOneof("offset_type")
    if which == "policy":
        kind = _OFFSET_POLICIES.get(option.policy)
        if kind is None:
            raise RequestError(f"unknown offset policy {option.policy}", Code.BAD_REQUEST)
        return OffsetOption(kind)
    if which is None:
        return None
    return OffsetOption(OffsetKind[which.upper()], getattr(option, which))
