"""``apache.rocketmq.v2`` protobuf <-> offset core (``services/broker/pull.py``).

Pulled messages are delivered like received ones (``consumer_convert.delivered_message``:
MD5 digest, body encoding, tag, keys, message type, queue id / offset, delivery attempt =
reconsume times + 1) but carry no receipt handle: a pull acknowledges nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s

from services.broker.consumer import FilterType
from services.broker.errors import Code, RequestError
from services.broker.pull import OffsetPolicy, Offsets, PullRequest, PullResult
from services.broker.v2.consumer_convert import delivered_message
from services.broker.v2.status import status

_POLICIES = {d.BEGINNING: OffsetPolicy.BEGINNING, d.END: OffsetPolicy.END, d.TIMESTAMP: OffsetPolicy.TIMESTAMP}


def queue_of(queue: d.MessageQueue) -> tuple[str, int, str]:
    """(topic, queue id, broker name or "")."""
    return queue.topic.name, queue.id, queue.broker.name if queue.HasField("broker") else ""


def query_offset(service: Offsets, request: s.QueryOffsetRequest) -> s.QueryOffsetResponse:
    topic, queue_id, broker = queue_of(request.message_queue)
    policy = _POLICIES.get(request.query_offset_policy)
    if policy is None:
        raise RequestError(f"unknown query_offset_policy {request.query_offset_policy}", Code.BAD_REQUEST)
    timestamp_ms = None
    if request.HasField("timestamp"):
        timestamp_ms = request.timestamp.seconds * 1000 + request.timestamp.nanos // 1_000_000
    offset = service.query_offset(topic, queue_id, policy, timestamp_ms, broker)
    return s.QueryOffsetResponse(status=status(Code.OK, "OK"), offset=offset)


def update_offset(service: Offsets, request: s.UpdateOffsetRequest) -> s.UpdateOffsetResponse:
    topic, queue_id, broker = queue_of(request.message_queue)
    service.update_offset(request.group.name, topic, queue_id, request.offset, broker)
    return s.UpdateOffsetResponse(status=status(Code.OK, "OK"))


def get_offset(service: Offsets, request: s.GetOffsetRequest) -> s.GetOffsetResponse:
    topic, queue_id, broker = queue_of(request.message_queue)
    offset = service.get_offset(request.group.name, topic, queue_id, broker)
    return s.GetOffsetResponse(status=status(Code.OK, "OK"), offset=offset)


def pull_request(
    request: s.PullMessageRequest, deadline_remaining_s: float | None, alive: Callable[[], bool]
) -> PullRequest:
    topic, queue_id, broker = queue_of(request.message_queue)
    expression = request.filter_expression if request.HasField("filter_expression") else None
    polling = request.long_polling_timeout if request.HasField("long_polling_timeout") else None
    if polling is not None and (polling.seconds < 0 or polling.nanos < 0):
        raise RequestError("long_polling_timeout must not be negative", Code.ILLEGAL_POLLING_TIME)
    return PullRequest(
        group=request.group.name,
        topic=topic,
        queue_id=queue_id,
        offset=request.offset,
        broker_name=broker,
        batch_size=request.batch_size,
        filter_type=FilterType.SQL if expression is not None and expression.type == d.SQL else FilterType.TAG,
        filter_expression=(expression.expression or "*") if expression is not None else "*",
        long_polling_ms=None if polling is None else polling.seconds * 1000 + polling.nanos // 1_000_000,
        deadline_remaining_ms=None if deadline_remaining_s is None else int(deadline_remaining_s * 1000),
        alive=alive,
    )


def pull_responses(result: PullResult) -> list[s.PullMessageResponse]:
    """status, the messages, next_offset."""
    out = [s.PullMessageResponse(status=status(result.code, result.message))]
    for delivery in result.messages:
        message = delivered_message(delivery)
        message.system_properties.ClearField("receipt_handle")
        out.append(s.PullMessageResponse(message=message))
    out.append(s.PullMessageResponse(next_offset=result.next_offset))
    return out


def pull_error(code: int, message: str) -> list[s.PullMessageResponse]:
    return [s.PullMessageResponse(status=status(code, message))]
