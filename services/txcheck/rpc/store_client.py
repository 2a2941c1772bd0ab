"""GrpcTxStore: ``model.TxStore`` over the store's gRPC API (``pyrmq.store.v1.Store``).

One channel; every call has a deadline; any gRPC failure (and a put that is not PUT_OK)
becomes ``StoreUnavailable``, which ends the pass (it is retried later). Records cross as
the store's ``MessageRecord``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.runtime.rpc.tls import TlsFiles, open_channel
from services.runtime.rpc.health import NotServingError, wait_serving
from services.domain.format.commitlog_format import MessageRecord, host_from_string, host_to_string
from services.runtime.clock import Clock
from services.txcheck.model import Appended, Page, StoreUnavailable
from services.domain.names import TRANS_CHECK_GROUP

log = logging.getLogger(__name__)

STORE_SERVICE = "pyrmq.store.v1.Store"


class GrpcTxStore:
    def __init__(self, address: str, rpc_timeout_s: float = 5.0, tls: TlsFiles | None = None) -> None:
        self.address = address
        self._timeout_s = rpc_timeout_s
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.StoreStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def wait_ready(self, timeout_s: float, clock: Clock, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Block until the store reports SERVING (True), or ``give_up()`` (False);
        StoreUnavailable after ``timeout_s``."""
        try:
            return wait_serving(self._channel, STORE_SERVICE, timeout_s, clock.monotonic_s, give_up)
        except NotServingError as exc:
            raise StoreUnavailable(f"store at {self.address} {exc}") from None

    def _call(self, method: str, request):
        try:
            return getattr(self._stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise StoreUnavailable(f"store {method} failed: {exc.code().name} {exc.details()}") from None
        except ValueError as exc:  # the channel is closed (stopping)
            raise StoreUnavailable(f"store client closed: {exc}") from None

    def read(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> Page:
        response = self._call("GetMessages", pb.GetMessagesRequest(
            topic=topic, queue_id=queue_id, queue_offset=queue_offset, max_count=max_count))
        return Page([record_from_pb(m) for m in response.messages], response.next_begin_offset)

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        response = self._call("GetQueueOffsets", pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id))
        return response.min_offset, response.max_offset

    def append(self, record: MessageRecord) -> Appended:
        request = pb.PutMessagesRequest(allow_system_topics=True, messages=[pb.Message(
            topic=record.topic, queue_id=record.queue_id, body=record.body, properties=record.properties,
            flag=record.flag, sys_flag=record.sys_flag, born_timestamp_ms=record.born_timestamp_ms,
            born_host=host_to_string(record.born_host), reconsume_times=record.reconsume_times)])
        [result] = self._call("PutMessages", request).results
        if result.status != pb.PUT_OK:
            raise StoreUnavailable(f"store refused a {record.topic} record: {pb.PutStatus.Name(result.status)} "
                                   f"{result.error}")
        return Appended(result.queue_offset, result.phy_offset, result.store_timestamp_ms)

    def commit_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self._call("CommitConsumerOffset", pb.CommitConsumerOffsetRequest(
            group=TRANS_CHECK_GROUP, topic=topic, queue_id=queue_id, offset=offset))

    def committed_offset(self, topic: str, queue_id: int) -> int:
        return self._call("QueryConsumerOffset", pb.QueryConsumerOffsetRequest(
            group=TRANS_CHECK_GROUP, topic=topic, queue_id=queue_id)).offset

    def find_by_key(self, topic: str, key: str, max_num: int) -> list[MessageRecord]:
        response = self._call("QueryMessagesByKey", pb.QueryMessagesByKeyRequest(topic=topic, key=key,
                                                                                 max_num=max_num))
        return [record_from_pb(m) for m in response.messages]


def record_from_pb(message: pb.Message) -> MessageRecord:
    return MessageRecord(
        topic=message.topic, queue_id=message.queue_id, body=message.body, properties=dict(message.properties),
        flag=message.flag, sys_flag=message.sys_flag, born_timestamp_ms=message.born_timestamp_ms,
        born_host=host_from_string(message.born_host or "127.0.0.1:0"),
        store_timestamp_ms=message.store_timestamp_ms,
        store_host=host_from_string(message.store_host or "127.0.0.1:0"), reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset, queue_offset=message.queue_offset,
        phy_offset=message.phy_offset, body_crc=message.body_crc, total_size=message.store_size_bytes)
