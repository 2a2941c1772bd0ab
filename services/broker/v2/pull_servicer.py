"""PullServicer: ``pyrmq.pull.v1.Pull`` (protos/pyrmq/pull/v1/pull.proto). Convert, call
``RawPullService`` (``services/broker/raw_pull.py``), convert.

Errors are in band, as MessagingService's PullMessage: a BrokerError becomes a response with
its status (and ends the stream); anything else is logged and answered INTERNAL_SERVER_ERROR.
The stream always ends. No client id is required (a pyrmq extension, not a v2 RPC).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from pyrmq.pull.v1 import pull_pb2 as pb
from pyrmq.pull.v1 import pull_pb2_grpc as pb_grpc

from services.broker.access import AccessGuard
from services.broker.consumer import FilterType
from services.broker.errors import FAILURES, Code, RequestError, as_broker_error
from services.broker.raw_pull import RawPullRequest, RawPullResult
from services.broker.v2.status import DIRECT, Peers, check_access, status

log = logging.getLogger(__name__)
Puller = Callable[[RawPullRequest], Iterator[RawPullResult]]  # RawPullService.pull, or one per broker group

PULL_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Pull"].full_name  # pyrmq.pull.v1.Pull
_FILTER_TYPES = {d.TAG: FilterType.TAG, d.SQL: FilterType.SQL, d.FILTER_TYPE_UNSPECIFIED: FilterType.TAG}


def raw_pull_request(
    request: pb.PullRecordsRequest, deadline_remaining_s: float | None, context: grpc.ServicerContext
) -> RawPullRequest:
    filter_type, expression = FilterType.TAG, "*"
    if request.HasField("filter_expression"):
        known = _FILTER_TYPES.get(request.filter_expression.type)
        if known is None:
            raise RequestError(f"unknown filter type {request.filter_expression.type}", Code.BAD_REQUEST)
        filter_type = known
        expression = request.filter_expression.expression  # an empty TAG expression accepts everything
    return RawPullRequest(
        topic=request.topic,
        queue_id=request.queue_id,
        queue_offset=request.queue_offset,
        end_offset=request.end_offset,
        consumer_group=request.consumer_group,
        broker_name=request.broker_name,
        max_msg_nums=request.max_msg_nums,
        max_msg_bytes=request.max_msg_bytes,
        filter_type=filter_type,
        filter_expression=expression,
        suspend_timeout_ms=request.suspend_timeout_millis,
        deadline_remaining_ms=None if deadline_remaining_s is None else int(deadline_remaining_s * 1000),
        alive=context.is_active,
    )


def response(result: RawPullResult) -> pb.PullRecordsResponse:
    return pb.PullRecordsResponse(
        status=status(result.code, result.message),
        records=b"".join(result.records),
        record_count=len(result.records),
        next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )


def error_response(code: int, message: str) -> pb.PullRecordsResponse:
    return pb.PullRecordsResponse(status=status(code, message), min_offset=-1, max_offset=-1)


class PullServicer(pb_grpc.PullServicer):
    def __init__(self, pull: Puller, guard: AccessGuard | None = None, peers: Peers = DIRECT) -> None:
        self._pull = pull
        self.guard = guard
        self.peers = peers

    def PullRecords(
        self, request: pb.PullRecordsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.PullRecordsResponse]:
        try:
            check_access(self.guard, "PullRecords", request, context, self.peers)
            for result in self._pull(raw_pull_request(request, context.time_remaining(), context)):
                yield response(result)
        except FAILURES as caught:
            exc = as_broker_error(caught)
            yield error_response(exc.code, exc.message)
        except Exception as exc:  # a bug: log it, answer in band
            log.exception("Pull.PullRecords failed")
            yield error_response(Code.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")


def add_pull_service(
    server: grpc.Server, pull: Puller, guard: AccessGuard | None = None, peers: Peers = DIRECT
) -> None:
    pb_grpc.add_PullServicer_to_server(PullServicer(pull, guard, peers), server)
