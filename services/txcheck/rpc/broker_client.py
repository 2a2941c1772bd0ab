"""GrpcProducers: ``model.Producers`` over the brokers' ``pyrmq.admin.v1.Admin/CheckTransaction``.

Producers keep their Telemetry streams open to brokers, so only a broker can reach one. A
check goes to the brokers in turn (the starting one rotates) until one answers SENT; the
outcome is NO_PRODUCER if at least one broker answered and none had a producer of the group,
UNREACHABLE if none answered. Never raises.
"""

from __future__ import annotations

import itertools
import logging
import threading

import grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.domain.format.properties_format import TAGS
from services.runtime.rpc.tls import TlsFiles, open_channel
from services.txcheck.model import CheckOutcome, CheckRequest

log = logging.getLogger(__name__)


def check_request_to_pb(request: CheckRequest) -> pb.CheckTransactionRequest:
    half = request.half
    return pb.CheckTransactionRequest(
        producer_group=request.producer_group,
        topic=request.topic,
        message_id=request.message_id,
        transaction_id=request.transaction_id,
        sys_flag=half.sys_flag,
        half=pb.MessageRecord(
            topic=half.topic,
            queue_id=half.queue_id,
            queue_offset=half.queue_offset,
            phy_offset=half.phy_offset,
            message_id=request.message_id,
            offset_msg_id=half.offset_msg_id,
            tag=half.properties.get(TAGS, ""),
            keys=half.keys,
            born_timestamp_ms=half.born_timestamp_ms,
            store_timestamp_ms=half.store_timestamp_ms,
            born_host=half.born_host,
            store_host=half.store_host,
            reconsume_times=half.reconsume_times,
            properties=half.properties,
            body=half.body,
        ),
    )


class GrpcProducers:
    def __init__(self, addresses: tuple[str, ...], rpc_timeout_s: float = 3.0, tls: TlsFiles | None = None) -> None:
        assert addresses, "at least one broker"
        self.addresses = addresses
        self._timeout_s = rpc_timeout_s
        self._channels = [open_channel(a, tls, options=[("grpc.max_send_message_length", -1)]) for a in addresses]
        self._stubs = [pb_grpc.AdminStub(c) for c in self._channels]
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def check(self, request: CheckRequest) -> CheckOutcome:
        message = check_request_to_pb(request)
        with self._lock:
            start = next(self._turn) % len(self._stubs)
        answered = False
        for index in list(range(start, len(self._stubs))) + list(range(start)):
            try:
                response = self._stubs[index].CheckTransaction(message, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                log.warning(
                    "broker %s did not take a transaction check: %s %s",
                    self.addresses[index],
                    exc.code().name,
                    exc.details(),
                )
                continue
            except ValueError:  # the channel is closed (stopping)
                continue
            answered = True
            if response.status == pb.SENT:
                log.debug(
                    "check of transaction %s sent to %s via %s",
                    request.transaction_id,
                    response.client_id,
                    self.addresses[index],
                )
                return CheckOutcome.SENT
        return CheckOutcome.NO_PRODUCER if answered else CheckOutcome.UNREACHABLE
