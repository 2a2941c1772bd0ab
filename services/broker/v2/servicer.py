"""MessagingServicer: ``apache.rocketmq.v2.MessagingService``. Convert, call the core, convert.

Every unary method is wrapped by ``status.in_band``: errors come back in the response's
``status`` (never as gRPC errors), and a call without ``x-mq-client-id`` gets
CLIENT_ID_REQUIRED. No broker logic lives here (docs/conventions.md, rule 4).

Consumer RPCs (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, QueryAssignment) are "convert (``consumer_convert``), call
``self._consumer`` (``services/broker/consumer.py``), convert". ReceiveMessage is a stream:
errors become a status element plus a delivery_timestamp element, and the stream always ends.
RecallMessage puts a recall marker for the scheduler (``Producer.recall``). The
offset RPCs (PullMessage, QueryOffset, UpdateOffset, GetOffset; pull clients such as the Spark
connector use them) are "convert (``pull_convert``), call ``OffsetService``
(``services/broker/pull.py``), convert";
SyncLiteSubscription is "call ``LiteConsumer.sync``" (``services/broker/lite_consumer.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.access import AccessGuard
from services.broker.broker_group_consumer import RoutedConsumer, RoutedOffsets
from services.broker.broker_group_router import RoutedProducer, RoutedTransactions, RouteService
from services.broker.consumer import validate_group
from services.broker.errors import FAILURES, BrokerError, Code, FlowControlError, UnsupportedError, as_broker_error
from services.broker.model import TrafficObserver
from services.broker.telemetry import TelemetryService
from services.broker.v2 import consumer_convert, convert, pull_convert
from services.broker.v2.status import DIRECT, OK_STATUS, Peers, check_access, client_id_of, in_band, peer_address
from services.broker.v2.telemetry_stream import TelemetryStreams
from services.runtime.clock import Clock, SystemClock

CONSUMER_TYPES = frozenset({d.PUSH_CONSUMER, d.SIMPLE_CONSUMER, d.PULL_CONSUMER})
log = logging.getLogger(__name__)

SEND_TIMEOUT_MARGIN_S = 0.05  # answer this much before the client's deadline


def _not_implemented(what: str) -> UnsupportedError:
    return UnsupportedError(f"{what} is not implemented by this broker yet", Code.NOT_IMPLEMENTED)


class MessagingServicer(s_grpc.MessagingServiceServicer):
    def __init__(
        self,
        routes: RouteService,
        producer: RoutedProducer,
        transactions: RoutedTransactions,
        telemetry: TelemetryService,
        streams: TelemetryStreams,
        send_timeout_s: float,
        consumer: RoutedConsumer | None = None,
        clock: Clock | None = None,
        traffic: TrafficObserver | None = None,
        offsets: RoutedOffsets | None = None,
        guard: AccessGuard | None = None,
        queue_wait_s: Callable[[], float] = lambda: 0.0,
        queue_wait_max_s: float = 0.0,
        peers: Peers = DIRECT,
    ) -> None:
        self.peers = peers  # the client behind a peer (services/broker/front.py)
        self._consumer = consumer
        self._queue_wait_s = queue_wait_s  # how long this call waited for a gRPC worker
        self._queue_wait_max_s = queue_wait_max_s  # 0: never shed
        self.shed = 0
        self._offsets = offsets
        self.guard = guard
        self._traffic = traffic
        self._clock = clock or SystemClock()
        self._routes = routes
        self._producer = producer
        self._transactions = transactions
        self._telemetry = telemetry
        self._streams = streams
        self._send_timeout_s = send_timeout_s

    def close(self) -> None:
        """End every Telemetry stream and parked receive (before the server stops)."""
        self._streams.close_all()
        if self._consumer is not None:
            self._consumer.close()
        if self._offsets is not None:  # also ends parked PullRecords calls (raw_pull.py reads through it)
            self._offsets.close()

    # -- routes and clients ---------------------------------------------------------------------
    @in_band(s.QueryRouteResponse)
    def QueryRoute(self, request: s.QueryRouteRequest, context: grpc.ServicerContext) -> s.QueryRouteResponse:
        return convert.route_response(request.topic, self._routes.query_route(request.topic.name))

    @in_band(s.HeartbeatResponse)
    def Heartbeat(self, request: s.HeartbeatRequest, context: grpc.ServicerContext) -> s.HeartbeatResponse:
        if request.client_type in CONSUMER_TYPES and request.HasField("group"):
            validate_group(request.group.name)
        if not self._telemetry.heartbeat(client_id_of(context)):
            # As the proxy: a client must send its Settings (Telemetry) before heartbeats.
            raise BrokerError(
                "no settings from this client yet: open Telemetry and send Settings first",
                Code.UNRECOGNIZED_CLIENT_TYPE,
            )
        return s.HeartbeatResponse(status=OK_STATUS)

    def Telemetry(
        self, request_iterator: Iterator[s.TelemetryCommand], context: grpc.ServicerContext
    ) -> Iterator[s.TelemetryCommand]:
        try:
            check_access(self.guard, "Telemetry", None, context, self.peers)
        except BrokerError as exc:  # a stream has no in-band status before its first command
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED if exc.code == Code.UNAUTHORIZED else grpc.StatusCode.PERMISSION_DENIED,
                exc.message,
            )
        return self._streams.serve(client_id_of(context), request_iterator, context)

    # Always OK: Node aborts the rest of its shutdown otherwise (docs/v2-clients.md, pitfall 20).
    @in_band(s.NotifyClientTerminationResponse, require_client_id=False)
    def NotifyClientTermination(
        self, request: s.NotifyClientTerminationRequest, context: grpc.ServicerContext
    ) -> s.NotifyClientTerminationResponse:
        self._telemetry.terminate(client_id_of(context))
        return s.NotifyClientTerminationResponse(status=OK_STATUS)

    # -- producer -------------------------------------------------------------------------------
    def _timeout_s(self, context: grpc.ServicerContext) -> float:
        remaining_s = context.time_remaining()
        if remaining_s is None:
            return self._send_timeout_s
        return min(self._send_timeout_s, remaining_s - SEND_TIMEOUT_MARGIN_S)

    @in_band(s.SendMessageResponse)
    def SendMessage(self, request: s.SendMessageRequest, context: grpc.ServicerContext) -> s.SendMessageResponse:
        self._shed_if_stale()
        messages = convert.incoming_messages(request)
        receipts = self._producer.send(messages, peer_address(context, self.peers), self._timeout_s(context))
        if self._traffic is not None:
            self._traffic.messages_in(messages, receipts)
        return convert.send_response(receipts)

    def _shed_if_stale(self) -> None:
        """Refuse, before any work, a send that waited too long for a worker (v2/pool.py)."""
        if self._queue_wait_max_s:
            waited_s = self._queue_wait_s()
            if waited_s > self._queue_wait_max_s:
                self.shed += 1
                raise FlowControlError(
                    f"the broker is overloaded: this send waited {waited_s * 1000:.0f} ms for a "
                    f"worker (over {self._queue_wait_max_s * 1000:.0f} ms); not sent"
                )

    @in_band(s.EndTransactionResponse)
    def EndTransaction(
        self, request: s.EndTransactionRequest, context: grpc.ServicerContext
    ) -> s.EndTransactionResponse:
        self._transactions.end_transaction(
            request.topic.name, request.transaction_id, convert.resolution(request.resolution), self._timeout_s(context)
        )
        return s.EndTransactionResponse(status=OK_STATUS)

    @in_band(s.RecallMessageResponse)
    def RecallMessage(self, request: s.RecallMessageRequest, context: grpc.ServicerContext) -> s.RecallMessageResponse:
        message_id = self._producer.recall(
            request.topic.name, request.recall_handle, peer_address(context, self.peers), self._timeout_s(context)
        )
        return s.RecallMessageResponse(status=OK_STATUS, message_id=message_id)

    # -- consumer (services/broker/consumer.py) -------------------------------------------------
    def _consumer_service(self) -> RoutedConsumer:
        if self._consumer is None:
            raise _not_implemented("consumption")
        return self._consumer

    @in_band(s.QueryAssignmentResponse)
    def QueryAssignment(
        self, request: s.QueryAssignmentRequest, context: grpc.ServicerContext
    ) -> s.QueryAssignmentResponse:
        route = self._consumer_service().query_assignment(request.group.name, request.topic.name)
        return consumer_convert.assignment_response(request.topic, route)

    def ReceiveMessage(
        self, request: s.ReceiveMessageRequest, context: grpc.ServicerContext
    ) -> Iterator[s.ReceiveMessageResponse]:
        # A stream must always end with a status element and terminate: a hung stream blocks the Py
        # client's receive thread until its deadline and loses the batch (docs/v2-clients.md, pitfall 16).
        result = None
        try:
            if not client_id_of(context):
                raise BrokerError("x-mq-client-id header is required", Code.CLIENT_ID_REQUIRED)
            check_access(self.guard, "ReceiveMessage", request, context, self.peers)
            receive = consumer_convert.receive_request(request, context.time_remaining())
            receive.alive = context.is_active
            receive.client_id = client_id_of(context)
            result = self._consumer_service().receive(receive)
            if self._traffic is not None and result.messages:
                self._traffic.messages_out(request.group.name, result.messages)
            responses = consumer_convert.receive_responses(result.messages, self._clock.now_ms())
        except FAILURES as caught:
            exc = as_broker_error(caught)
            responses = consumer_convert.receive_error(exc.code, exc.message, self._clock.now_ms())
        except Exception as exc:  # a bug: log it, answer in band
            log.exception("ReceiveMessage failed")
            responses = consumer_convert.receive_error(
                Code.INTERNAL_SERVER_ERROR, f"internal error: {exc}", self._clock.now_ms()
            )
        written = False
        try:
            yield from responses
            written = True
        finally:
            if not written and result is not None and result.messages:  # the call ended first
                self._consumer_service().undelivered(request.group.name, [m.receipt_handle for m in result.messages])

    @in_band(s.AckMessageResponse)
    def AckMessage(self, request: s.AckMessageRequest, context: grpc.ServicerContext) -> s.AckMessageResponse:
        results = self._consumer_service().ack(
            request.group.name, request.topic.name, [entry.receipt_handle for entry in request.entries]
        )
        return consumer_convert.ack_response(request, results)

    @in_band(s.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(
        self, request: s.ChangeInvisibleDurationRequest, context: grpc.ServicerContext
    ) -> s.ChangeInvisibleDurationResponse:
        handle = self._consumer_service().change_invisible_duration(
            request.group.name,
            request.topic.name,
            request.receipt_handle,
            consumer_convert.change_invisible_ms(request),
            request.suspend,
        )
        return s.ChangeInvisibleDurationResponse(status=OK_STATUS, receipt_handle=handle)

    @in_band(s.ForwardMessageToDeadLetterQueueResponse)
    def ForwardMessageToDeadLetterQueue(
        self, request: s.ForwardMessageToDeadLetterQueueRequest, context: grpc.ServicerContext
    ) -> s.ForwardMessageToDeadLetterQueueResponse:
        self._consumer_service().forward_to_dead_letter_queue(
            request.group.name, request.topic.name, request.receipt_handle
        )
        return s.ForwardMessageToDeadLetterQueueResponse(status=OK_STATUS)

    # -- offset-based pulls (services/broker/pull.py); the official clients never call them ---
    def _offset_service(self) -> RoutedOffsets:
        if self._offsets is None:
            raise _not_implemented("offset-based pulls")
        return self._offsets

    def PullMessage(
        self, request: s.PullMessageRequest, context: grpc.ServicerContext
    ) -> Iterator[s.PullMessageResponse]:
        # Like ReceiveMessage: errors in-band, and the stream always ends.
        try:
            if not client_id_of(context):
                raise BrokerError("x-mq-client-id header is required", Code.CLIENT_ID_REQUIRED)
            check_access(self.guard, "PullMessage", request, context, self.peers)
            pull = pull_convert.pull_request(request, context.time_remaining(), context.is_active)
            responses = pull_convert.pull_responses(self._offset_service().pull(pull))
        except FAILURES as caught:
            exc = as_broker_error(caught)
            responses = pull_convert.pull_error(exc.code, exc.message)
        except Exception as exc:  # a bug: log it, answer in band
            log.exception("PullMessage failed")
            responses = pull_convert.pull_error(Code.INTERNAL_SERVER_ERROR, f"internal error: {exc}")
        yield from responses

    @in_band(s.UpdateOffsetResponse)
    def UpdateOffset(self, request: s.UpdateOffsetRequest, context: grpc.ServicerContext) -> s.UpdateOffsetResponse:
        return pull_convert.update_offset(self._offset_service(), request)

    @in_band(s.GetOffsetResponse)
    def GetOffset(self, request: s.GetOffsetRequest, context: grpc.ServicerContext) -> s.GetOffsetResponse:
        return pull_convert.get_offset(self._offset_service(), request)

    @in_band(s.QueryOffsetResponse)
    def QueryOffset(self, request: s.QueryOffsetRequest, context: grpc.ServicerContext) -> s.QueryOffsetResponse:
        return pull_convert.query_offset(self._offset_service(), request)

    @in_band(s.SyncLiteSubscriptionResponse)
    def SyncLiteSubscription(
        self, request: s.SyncLiteSubscriptionRequest, context: grpc.ServicerContext
    ) -> s.SyncLiteSubscriptionResponse:
        lite = self._consumer_service().lite
        if lite is None:
            raise UnsupportedError("lite topics are not supported by this broker", Code.UNSUPPORTED)
        language = dict(context.invocation_metadata()).get("x-mq-language", "")
        lite.sync(
            client_id_of(context),
            request.group.name,
            request.topic.name,
            request.action,
            request.lite_topic_set,
            str(language),
            consumer_convert.offset_option(request),
        )
        return s.SyncLiteSubscriptionResponse(status=OK_STATUS)
