"""MessagingServicer: ``apache.rocketmq.v2.MessagingService``. Convert, call the core, convert.

Every unary method is wrapped by ``status.in_band``: errors come back in the response's
``status`` (never as gRPC errors), and a call without ``x-mq-client-id`` gets
CLIENT_ID_REQUIRED. No broker logic lives here (style rule 5).

Consumer RPCs (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, QueryAssignment) answer NOT_IMPLEMENTED until
``services/broker/consumer.py`` lands: each of them becomes "convert, call
``self._consumer``, convert", like SendMessage. RecallMessage (needs the scheduler) and the
offset RPCs answer NOT_IMPLEMENTED too (the clients never call the offset RPCs);
SyncLiteSubscription answers UNSUPPORTED (lite topics are not supported).
"""
from __future__ import annotations

from collections.abc import Iterator

import grpc
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.errors import Code, UnsupportedError
from services.broker.producer import Producer
from services.broker.route import RouteService
from services.broker.rpc import convert
from services.broker.rpc.status import OK_STATUS, client_id_of, in_band, peer_address, status
from services.broker.rpc.telemetry_stream import TelemetryStreams
from services.broker.telemetry import TelemetryService
from services.broker.transaction import TransactionService

SEND_TIMEOUT_MARGIN_S = 0.05  # answer this much before the client's deadline


def _not_implemented(what: str) -> UnsupportedError:
    return UnsupportedError(f"{what} is not implemented by this broker yet", Code.NOT_IMPLEMENTED)


class MessagingServicer(s_grpc.MessagingServiceServicer):
    def __init__(self, routes: RouteService, producer: Producer, transactions: TransactionService,
                 telemetry: TelemetryService, streams: TelemetryStreams, send_timeout_s: float) -> None:
        self._routes = routes
        self._producer = producer
        self._transactions = transactions
        self._telemetry = telemetry
        self._streams = streams
        self._send_timeout_s = send_timeout_s

    def close(self) -> None:
        """End every Telemetry stream (before the server stops)."""
        self._streams.close_all()

    # -- routes and clients ---------------------------------------------------------------------
    @in_band(s.QueryRouteResponse)
    def QueryRoute(self, request: s.QueryRouteRequest, context: grpc.ServicerContext) -> s.QueryRouteResponse:
        return convert.route_response(request.topic, self._routes.query_route(request.topic.name))

    @in_band(s.HeartbeatResponse)
    def Heartbeat(self, request: s.HeartbeatRequest, context: grpc.ServicerContext) -> s.HeartbeatResponse:
        self._telemetry.heartbeat(client_id_of(context))
        return s.HeartbeatResponse(status=OK_STATUS)

    def Telemetry(self, request_iterator: Iterator[s.TelemetryCommand],
                  context: grpc.ServicerContext) -> Iterator[s.TelemetryCommand]:
        return self._streams.serve(client_id_of(context), request_iterator, context)

    @in_band(s.NotifyClientTerminationResponse, require_client_id=False)  # always OK (pitfall §10.20)
    def NotifyClientTermination(self, request: s.NotifyClientTerminationRequest,
                                context: grpc.ServicerContext) -> s.NotifyClientTerminationResponse:
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
        receipts = self._producer.send(convert.incoming_messages(request), peer_address(context),
                                       self._timeout_s(context))
        return convert.send_response(receipts)

    @in_band(s.EndTransactionResponse)
    def EndTransaction(self, request: s.EndTransactionRequest, context: grpc.ServicerContext) -> s.EndTransactionResponse:
        self._transactions.end_transaction(request.topic.name, request.transaction_id,
                                           convert.resolution(request.resolution), self._timeout_s(context))
        return s.EndTransactionResponse(status=OK_STATUS)

    @in_band(s.RecallMessageResponse)
    def RecallMessage(self, request: s.RecallMessageRequest, context: grpc.ServicerContext) -> s.RecallMessageResponse:
        raise _not_implemented("RecallMessage")

    # -- consumer (services/broker/consumer.py, next step) ---------------------------------------
    @in_band(s.QueryAssignmentResponse)
    def QueryAssignment(self, request: s.QueryAssignmentRequest,
                        context: grpc.ServicerContext) -> s.QueryAssignmentResponse:
        raise _not_implemented("QueryAssignment")

    def ReceiveMessage(self, request: s.ReceiveMessageRequest,
                       context: grpc.ServicerContext) -> Iterator[s.ReceiveMessageResponse]:
        # A stream must always end with a status element and terminate (pitfall §10.16).
        yield s.ReceiveMessageResponse(status=status(Code.NOT_IMPLEMENTED,
                                                     "ReceiveMessage is not implemented by this broker yet"))

    @in_band(s.AckMessageResponse)
    def AckMessage(self, request: s.AckMessageRequest, context: grpc.ServicerContext) -> s.AckMessageResponse:
        raise _not_implemented("AckMessage")

    @in_band(s.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request: s.ChangeInvisibleDurationRequest,
                                context: grpc.ServicerContext) -> s.ChangeInvisibleDurationResponse:
        raise _not_implemented("ChangeInvisibleDuration")

    @in_band(s.ForwardMessageToDeadLetterQueueResponse)
    def ForwardMessageToDeadLetterQueue(self, request: s.ForwardMessageToDeadLetterQueueRequest,
                                        context: grpc.ServicerContext) -> s.ForwardMessageToDeadLetterQueueResponse:
        raise _not_implemented("ForwardMessageToDeadLetterQueue")

    # -- never called by the official clients ----------------------------------------------------
    def PullMessage(self, request: s.PullMessageRequest,
                    context: grpc.ServicerContext) -> Iterator[s.PullMessageResponse]:
        yield s.PullMessageResponse(status=status(Code.NOT_IMPLEMENTED, "PullMessage is not implemented"))

    @in_band(s.UpdateOffsetResponse)
    def UpdateOffset(self, request: s.UpdateOffsetRequest, context: grpc.ServicerContext) -> s.UpdateOffsetResponse:
        raise _not_implemented("UpdateOffset")

    @in_band(s.GetOffsetResponse)
    def GetOffset(self, request: s.GetOffsetRequest, context: grpc.ServicerContext) -> s.GetOffsetResponse:
        raise _not_implemented("GetOffset")

    @in_band(s.QueryOffsetResponse)
    def QueryOffset(self, request: s.QueryOffsetRequest, context: grpc.ServicerContext) -> s.QueryOffsetResponse:
        raise _not_implemented("QueryOffset")

    @in_band(s.SyncLiteSubscriptionResponse)
    def SyncLiteSubscription(self, request: s.SyncLiteSubscriptionRequest,
                             context: grpc.ServicerContext) -> s.SyncLiteSubscriptionResponse:
        raise UnsupportedError("lite topics are not supported by this broker", Code.UNSUPPORTED)
