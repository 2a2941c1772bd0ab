"""The pop RPCs (PopMessages, AckMessage, ChangeInvisibleDuration, ForwardToDeadLetterQueue)
over a real gRPC server on 127.0.0.1:0, with a ManualClock-driven FileStore behind it."""

from __future__ import annotations

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.java_compat import java_string_hash
from tests.support.store_pop_rpc import (
    DLQ,
    GROUP,
    INVISIBLE_MS,
    RETRY,
    RPC_TIMEOUT_S,
    TOPIC,
    Served,
    message,
    pop_served,  # noqa: F401 - this module's "served" fixture
)


def test_pop_and_ack(served: Served) -> None:
    served.put(message(b"zero", 0, UNIQ_KEY="U0"), message(b"one", 1))
    response = served.pop(max_count=0)  # 0 means the default batch (32)
    assert response.status == pb.POP_FOUND
    assert sorted(m.message.body for m in response.messages) == [b"one", b"zero"]
    popped = {m.message.body: m for m in response.messages}[b"zero"]
    assert popped.message.topic == TOPIC and popped.source_topic == TOPIC
    assert (popped.queue_id, popped.queue_offset, popped.delivery_attempt) == (0, 0, 1)
    assert popped.message.properties["UNIQ_KEY"] == "U0" and popped.message.born_host == "10.1.2.3:54321"
    assert popped.receipt_handle
    assert {(q.topic, q.queue_id) for q in response.examined_queues} == {(TOPIC, 0), (TOPIC, 1), (RETRY, 0)}
    for m in response.messages:
        assert served.ack(m.receipt_handle) == pb.ACK_OK
    assert served.ack(popped.receipt_handle) == pb.ACK_OK  # a repeated ack (as RocketMQ answers it)
    empty = served.pop()
    assert empty.status == pb.POP_NO_MESSAGE and not empty.messages
    offset = served.stub.QueryConsumerOffset(pb.QueryConsumerOffsetRequest(group=GROUP, topic=TOPIC, queue_id=0))
    assert offset.offset == 1


def test_redelivery_reports_the_original_topic(served: Served) -> None:
    served.put(message(b"again"))
    first = served.pop().messages[0]
    served.clock.advance_ms(INVISIBLE_MS)
    assert served.ack(first.receipt_handle) == pb.INVALID_RECEIPT_HANDLE  # expired
    served.revive()
    second = served.pop().messages[0]
    assert second.message.topic == TOPIC and second.source_topic == RETRY
    assert second.delivery_attempt == 2 and second.message.reconsume_times == 1
    assert second.message.properties["RETRY_TOPIC"] == TOPIC
    assert served.ack(second.receipt_handle) == pb.ACK_OK


def test_change_invisible_duration(served: Served) -> None:
    served.put(message(b"slow"))
    old = served.pop().messages[0].receipt_handle
    changed = served.change(old, 120_000)
    assert changed.status == pb.ACK_OK and changed.receipt_handle and changed.receipt_handle != old
    assert served.ack(old) == pb.INVALID_RECEIPT_HANDLE
    bad = served.change(old, 1_000)
    assert bad.status == pb.INVALID_RECEIPT_HANDLE and bad.receipt_handle == ""
    served.clock.advance_ms(60_000)
    served.revive()
    assert served.pop().status == pb.POP_NO_MESSAGE
    assert served.ack(changed.receipt_handle) == pb.ACK_OK


def test_forward_to_dead_letter_queue(served: Served) -> None:
    served.put(message(b"dead", UNIQ_KEY="D1"))
    handle = served.pop().messages[0].receipt_handle
    request = pb.ForwardToDeadLetterQueueRequest(group=GROUP, topic=TOPIC, receipt_handle=handle)
    assert served.stub.ForwardToDeadLetterQueue(request, timeout=RPC_TIMEOUT_S).status == pb.ACK_OK
    assert served.stub.ForwardToDeadLetterQueue(request, timeout=RPC_TIMEOUT_S).status == pb.INVALID_RECEIPT_HANDLE
    served.store.reput.run_once()
    dead = served.pop(group="DlqReader", topic=DLQ).messages
    assert [m.message.body for m in dead] == [b"dead"]
    assert dead[0].message.topic == DLQ
    assert dead[0].message.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert dead[0].message.properties["DLQ_ORIGIN_MESSAGE_ID"] == "D1"


def test_fifo_and_tag_filter(served: Served) -> None:
    served.put(message(b"a0", TAGS="a"), message(b"b1", TAGS="b"), message(b"a2", TAGS="a"))
    first = served.pop(queue_id=0, max_count=1, fifo=True, tags_codes=[java_string_hash("a")])
    assert [m.message.body for m in first.messages] == [b"a0"]
    assert served.pop(queue_id=0, fifo=True).status == pb.POP_NO_MESSAGE  # locked while in flight
    assert served.ack(first.messages[0].receipt_handle) == pb.ACK_OK
    rest = served.pop(queue_id=0, fifo=True, tags_codes=[java_string_hash("a")])
    assert [(m.message.body, m.queue_offset) for m in rest.messages] == [(b"a2", 2)]


@pytest.mark.parametrize(
    "request_",
    [
        pb.PopMessagesRequest(group="", topic=TOPIC, queue_id=-1),
        pb.PopMessagesRequest(group=GROUP, topic="", queue_id=-1),
        pb.PopMessagesRequest(group=GROUP, topic=TOPIC, queue_id=-1, max_count=-1),
        pb.PopMessagesRequest(group=GROUP, topic=TOPIC, queue_id=-1, invisible_duration_ms=-5),
        pb.PopMessagesRequest(group="bad group!", topic=TOPIC, queue_id=-1),
        pb.PopMessagesRequest(group=GROUP, topic=TOPIC, queue_id=-7),
    ],
)
def test_pop_bad_arguments_are_invalid_argument(served: Served, request_: pb.PopMessagesRequest) -> None:
    with pytest.raises(grpc.RpcError) as error:
        served.stub.PopMessages(request_, timeout=RPC_TIMEOUT_S)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_receipt_calls_validate_arguments_and_report_bad_handles_as_status(served: Served) -> None:
    assert served.ack("") == pb.INVALID_RECEIPT_HANDLE
    assert served.ack("not-a-handle") == pb.INVALID_RECEIPT_HANDLE
    assert served.change("not-a-handle", 0).status == pb.INVALID_RECEIPT_HANDLE
    with pytest.raises(grpc.RpcError) as no_group:
        served.stub.AckMessage(pb.AckMessageRequest(topic=TOPIC, receipt_handle="x"), timeout=RPC_TIMEOUT_S)
    assert no_group.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as negative:
        served.change("x", -1)
    assert negative.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_pop_on_a_stopped_store_is_unavailable(served: Served) -> None:
    served.store.shutdown()
    with pytest.raises(grpc.RpcError) as error:
        served.pop()
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE


def test_ack_messages_acks_many_in_one_call_with_a_status_each(served: Served) -> None:
    served.put(*(message(f"m{i}".encode(), queue_id=i % 2) for i in range(5)))
    popped = served.pop(max_count=5).messages
    assert len(popped) == 5
    handles = [m.receipt_handle for m in popped]
    response = served.stub.AckMessages(
        pb.AckMessagesRequest(
            group=GROUP, topic=TOPIC, receipt_handles=[handles[0], "bogus", *handles[1:], handles[0]]
        ),
        timeout=RPC_TIMEOUT_S,
    )
    assert list(response.statuses) == [
        pb.ACK_OK,
        pb.INVALID_RECEIPT_HANDLE,
        *[pb.ACK_OK] * 4,
        pb.ACK_OK,
    ]  # the repeat: acked already, answered OK
    served.clock.advance_ms(INVISIBLE_MS + 1)
    served.revive()
    assert list(served.pop(max_count=5).messages) == []  # all acked: nothing comes back
    with pytest.raises(grpc.RpcError) as too_many:
        served.stub.AckMessages(
            pb.AckMessagesRequest(group=GROUP, topic=TOPIC, receipt_handles=["x"] * 1025), timeout=RPC_TIMEOUT_S
        )
    assert too_many.value.code() is grpc.StatusCode.INVALID_ARGUMENT
