"""The broker's put link (rpc/put_stream.py): batches go over one long-lived PutMessagesStream,
answered in order exactly as unary PutMessages; failures fail the put in flight as the unary
call would, and the next put opens a new stream."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.errors import Code, as_broker_error
from services.runtime.clock import ManualClock
from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import MessageToPut, PutStatus
from services.store.client.put_stream import PutStream


def msg(i: int) -> MessageToPut:
    return MessageToPut(topic="PutStream", queue_id=i % 4, body=f"m{i}".encode(), properties={"KEYS": f"k{i}"})


def test_puts_share_one_stream_and_match_unary_answers(store_address: str, store_stub) -> None:
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name="PutStream", read_queue_nums=4, write_queue_nums=4, perm=6)
        ),
        timeout=5,
    )
    client = GrpcStoreClient(store_address)
    try:
        outcomes = [client.put_messages([msg(i), msg(i + 100)], False) for i in range(20)]
        assert client.transport.put_stream is not None and client.transport.put_stream.streams_opened == 1
        assert all(o.status is PutStatus.PUT_OK for pair in outcomes for o in pair)
        # In order, per queue: the second message of each pair right after the first.
        assert all(b.phy_offset > a.phy_offset for a, b in outcomes)
        # The same as a unary PutMessages would answer (a refusal is in band, per message).
        [refused] = client.put_messages([MessageToPut(topic="bad topic", queue_id=0, body=b"x", properties={})], False)
        unary = GrpcStoreClient(store_address, put_stream=False)
        try:
            [same] = unary.put_messages([MessageToPut(topic="bad topic", queue_id=0, body=b"x", properties={})], False)
        finally:
            unary.close()
        assert (refused.status, refused.error) == (same.status, same.error) != (PutStatus.PUT_OK, "")
        assert client.transport.put_stream.streams_opened == 1  # an in-band refusal keeps the stream
    finally:
        client.close()


class FakeCall:
    """A stream-stream call double: answers each request via ``answer``, or hangs."""

    def __init__(self, requests: Iterator, answer) -> None:
        self.requests, self.answer = requests, answer
        self.cancelled = threading.Event()

    def __iter__(self) -> FakeCall:
        return self

    def __next__(self):
        request = next(self.requests)
        return self.answer(request, self)

    def cancel(self) -> None:
        self.cancelled.set()


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def stream_with(answer, unary=None, clock=None):
    calls: list[FakeCall] = []

    def open_stream(requests: Iterator) -> FakeCall:
        calls.append(FakeCall(requests, answer))
        return calls[-1]

    unary_calls: list = []

    def unary_put(request):
        unary_calls.append(request)
        return (unary or (lambda r: pb.PutMessagesResponse()))(request)

    clock = clock or ManualClock()
    return PutStream(open_stream, unary_put, 5.0, clock.monotonic_s), calls, unary_calls


def test_a_failed_stream_fails_its_put_and_the_next_put_opens_a_new_one() -> None:
    answers = iter([Failed(grpc.StatusCode.UNAVAILABLE), pb.PutMessagesResponse()])

    def answer(request, call):
        result = next(answers)
        if isinstance(result, Exception):
            raise result
        return result

    stream, calls, _ = stream_with(answer)
    with pytest.raises(grpc.RpcError) as failed:
        stream.put(pb.PutMessagesRequest())
    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert calls[0].cancelled.is_set()
    assert stream.put(pb.PutMessagesRequest()) == pb.PutMessagesResponse()
    assert stream.streams_opened == 2


def test_an_overdue_put_is_cancelled_and_reported_as_a_deadline() -> None:
    clock = ManualClock()
    entered = threading.Event()

    def hang(request, call):
        entered.set()
        call.cancelled.wait(5)
        raise Failed(grpc.StatusCode.CANCELLED)

    stream, calls, _ = stream_with(hang, clock=clock)
    errors: list[grpc.RpcError] = []
    putter = threading.Thread(target=lambda: errors.append(_raised(stream.put, pb.PutMessagesRequest())))
    putter.start()
    assert entered.wait(5)
    assert stream.run_once() is False  # not overdue yet
    clock.advance_ms(5_001)
    assert stream.run_once() is True  # the watchdog cancels the stream
    putter.join(5)
    assert errors[0].code() is grpc.StatusCode.DEADLINE_EXCEEDED
    stream.close()


def _raised(fn, *args):
    try:
        fn(*args)
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("no error")


def test_a_store_without_the_stream_gets_unary_puts() -> None:
    def unimplemented(request, call):
        raise Failed(grpc.StatusCode.UNIMPLEMENTED)

    stream, calls, unary_calls = stream_with(unimplemented)
    stream.put(pb.PutMessagesRequest())
    stream.put(pb.PutMessagesRequest())
    assert (len(calls), len(unary_calls)) == (1, 2)  # tried once, then unary for good


def test_a_put_finding_the_stream_busy_goes_unary() -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(request, call):
        entered.set()
        release.wait(5)
        return pb.PutMessagesResponse()

    stream, calls, unary_calls = stream_with(slow)
    first = threading.Thread(target=stream.put, args=(pb.PutMessagesRequest(),))
    first.start()
    assert entered.wait(5)
    stream.put(pb.PutMessagesRequest())  # does not wait for the stream
    assert len(unary_calls) == 1
    release.set()
    first.join(5)


def test_store_unreachable_mid_stream_is_a_store_call_error(store_address: str) -> None:
    client = GrpcStoreClient(store_address)
    client.close()
    with pytest.raises(StoreUnavailableError) as failed:
        client.put_messages([msg(1)], False)
    assert as_broker_error(failed.value).code == Code.INTERNAL_SERVER_ERROR
