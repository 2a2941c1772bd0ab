"""GrpcSchedulerStore: ``SchedulerStore`` over the store's gRPC API (``pyrmq.store.v1.Store``).

One channel for every scheduler thread (grpc channels are thread-safe). Any gRPC failure
becomes ``StoreUnavailableError``: the loops back off and retry with their state unchanged.
"""
from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.runtime.rpc.tls import TlsFiles, open_channel
from services.runtime.rpc.health import NotServingError, wait_serving
from services.runtime.clock import Clock, SystemClock
from services.scheduler.errors import StoreUnavailableError
from services.scheduler.model import GetResult, GetStatus, OutgoingMessage, PutOutcome, PutStatus, StoredRecord
from services.domain.format.commitlog_format import BLANK, CorruptRecord, decode_record, host_to_string

log = logging.getLogger(__name__)

STORE_SERVICE = "pyrmq.store.v1.Store"
LOOK_BATCH_RECORDS_MAX = 1024       # the store's limit per LookRawMessages
WATCH_RETRY_INTERVAL_S = 0.5
_PUT_STATUS = {pb.PutStatus.Value(status.name): status for status in PutStatus}
_GET_STATUS = {pb.GetStatus.Value(status.name): status for status in GetStatus}


def _unavailable(exc: grpc.RpcError, what: str) -> StoreUnavailableError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return StoreUnavailableError(f"store call {what} failed: {code.name if code else 'UNKNOWN'} {details}")


def _record(raw: bytes) -> StoredRecord | None:
    """Decode one raw CommitLog record; None if the bytes are not a record."""
    try:
        record = decode_record(raw, 0, len(raw), check_crc=False)
    except (CorruptRecord, ValueError, TypeError, struct.error):
        return None
    if record is BLANK:
        return None
    return StoredRecord(record.topic, record.queue_id, record.body, record.properties, record.queue_offset,
                        record.phy_offset, record.total_size, record.store_timestamp_ms, record.sys_flag, record.flag,
                        record.born_timestamp_ms, host_to_string(record.born_host), record.reconsume_times)


class GrpcSchedulerStore:
    def __init__(self, address: str, rpc_timeout_s: float = 10.0, tls: TlsFiles | None = None) -> None:
        self.address = address
        self._timeout_s = rpc_timeout_s
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.StoreStub(self._channel)
        self._watch_call = None

    def close(self) -> None:
        self._channel.close()

    def wait_ready(self, timeout_s: float, clock: Clock | None = None,
                   give_up: Callable[[], bool] = lambda: False) -> bool:
        """Block until the store reports SERVING (True) or ``give_up()`` (False);
        StoreUnavailableError after ``timeout_s``."""
        clock = clock or SystemClock()
        try:
            return wait_serving(self._channel, STORE_SERVICE, timeout_s, clock.monotonic_s, give_up)
        except NotServingError as exc:
            raise StoreUnavailableError(f"store at {self.address} {exc}") from None

    # -- messages -------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetResult:
        request = pb.GetMessagesRequest(topic=topic, queue_id=queue_id, queue_offset=queue_offset, max_count=max_count)
        try:
            response = self._stub.GetRawMessages(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise _unavailable(exc, "GetRawMessages") from None
        records = [record for raw in response.records if (record := _record(raw)) is not None]
        if len(records) < len(response.records):
            log.error("%d undecodable records in %s-%d from offset %d skipped", len(response.records) - len(records),
                      topic, queue_id, queue_offset)
        return GetResult(_GET_STATUS[response.status], records, response.next_begin_offset, response.min_offset,
                         response.max_offset)

    def look_messages(self, refs: list[tuple[int, int]]) -> dict[int, StoredRecord]:
        found: dict[int, StoredRecord] = {}
        for start in range(0, len(refs), LOOK_BATCH_RECORDS_MAX):
            chunk = refs[start:start + LOOK_BATCH_RECORDS_MAX]
            request = pb.LookRawMessagesRequest(phy_offsets=[offset for offset, _ in chunk],
                                                sizes=[size for _, size in chunk])
            try:
                response = self._stub.LookRawMessages(request, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                raise _unavailable(exc, "LookRawMessages") from None
            for (offset, size), raw in zip(chunk, response.records):
                record = _record(raw) if raw else None
                if record is not None and record.phy_offset == offset and record.store_size_bytes == size:
                    found[offset] = record
        return found

    def put_messages(self, messages: list[OutgoingMessage]) -> list[PutOutcome]:
        request = pb.PutMessagesRequest(allow_system_topics=True)
        add = request.messages.add
        for message in messages:
            out = add()
            out.topic = message.topic
            out.queue_id = message.queue_id
            out.body = message.body
            out.properties.update(message.properties)
            out.sys_flag = message.sys_flag
            out.flag = message.flag
            out.born_timestamp_ms = message.born_timestamp_ms
            out.born_host = message.born_host
            out.reconsume_times = message.reconsume_times
        try:
            response = self._stub.PutMessages(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise _unavailable(exc, "PutMessages") from None
        if len(response.results) != len(messages):
            raise StoreUnavailableError(f"store answered {len(response.results)} results for {len(messages)} messages")
        return [PutOutcome(_PUT_STATUS[r.status], r.phy_offset, r.queue_offset, r.error) for r in response.results]

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        try:
            response = self._stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id),
                                                  timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise _unavailable(exc, "GetQueueOffsets") from None
        return response.min_offset, response.max_offset

    def get_delay_offset(self, level: int) -> int:
        try:
            return self._stub.GetDelayOffset(pb.GetDelayOffsetRequest(level=level), timeout=self._timeout_s).offset
        except grpc.RpcError as exc:
            raise _unavailable(exc, "GetDelayOffset") from None

    def update_delay_offset(self, level: int, offset: int) -> None:
        try:
            self._stub.UpdateDelayOffset(pb.UpdateDelayOffsetRequest(level=level, offset=offset),
                                         timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise _unavailable(exc, "UpdateDelayOffset") from None

    # -- arrivals -------------------------------------------------------------------------------
    def watch_arrivals(self, topics: list[str], on_arrival: Callable[[str], None], on_restart: Callable[[], None],
                       stopped: threading.Event) -> None:
        """Follow WatchArrivals for ``topics`` until ``stopped`` (runs on the caller's thread)."""
        while not stopped.is_set():
            call = self._stub.WatchArrivals(pb.WatchArrivalsRequest(topics=topics), wait_for_ready=True)
            self._watch_call = call
            if stopped.is_set():   # stop_watching ran before the call existed
                call.cancel()
                return
            try:
                on_restart()
                for batch in call:
                    for arrival in batch.arrivals:
                        on_arrival(arrival.topic)
            except grpc.RpcError as exc:
                if not stopped.is_set():
                    log.debug("WatchArrivals ended: %s", exc.code())
            except ValueError:  # the channel was closed under the stream
                return
            stopped.wait(WATCH_RETRY_INTERVAL_S)

    def stop_watching(self) -> None:
        call = self._watch_call
        if call is not None:
            call.cancel()
