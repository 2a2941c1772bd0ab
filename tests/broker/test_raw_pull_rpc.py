"""pyrmq.pull.v1.Pull/PullRecords over gRPC (real store and broker): the records decode to what
was stored, filters, end offsets, long polling, in-band errors, and the service is advertised."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyrmq.pull.v1 import pull_pb2 as pb
from pyrmq.pull.v1 import pull_pb2_grpc as pb_grpc

from services.domain.format.commitlog_format import decode_record
from tests.support.pull_queues import put


@pytest.fixture
def pull_stub(broker):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield pb_grpc.PullStub(channel)


def pull(stub, topic, queue_id=0, offset=0, timeout=10, expression=None, filter_type=d.TAG, **fields):
    request = pb.PullRecordsRequest(topic=topic, queue_id=queue_id, queue_offset=offset, **fields)
    if expression is not None:
        request.filter_expression.CopyFrom(d.FilterExpression(type=filter_type, expression=expression))
    return list(stub.PullRecords(request, timeout=timeout))


def split(response: pb.PullRecordsResponse) -> list:
    """The records of one response, decoded (checks the concatenation is exact)."""
    data, pos, out = response.records, 0, []
    while pos < len(data):
        record = decode_record(data, pos, len(data))
        out.append(record)
        pos += record.total_size
    assert pos == len(data) and len(out) == response.record_count
    return out


def test_records_decode_to_what_was_stored(broker, pull_stub, store_stub):
    results = put(store_stub, "RawRpc", 1, 7)
    [response] = pull(pull_stub, "RawRpc", 1, 0, max_msg_nums=5)
    assert response.status.code == d.OK and response.record_count == 5
    assert (response.next_begin_offset, response.min_offset, response.max_offset) == (5, 0, 7)
    records = split(response)
    assert [r.body for r in records] == [b"m%d" % i for i in range(5)]
    assert [r.queue_offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.phy_offset for r in records] == [r.phy_offset for r in results[:5]]
    first = records[0]
    assert first.topic == "RawRpc" and first.queue_id == 1
    assert first.properties == {"TAGS": "TagA", "KEYS": "k0 x", "UNIQ_KEY": "ID0000", "color": "red"}
    assert first.store_timestamp_ms == results[0].store_timestamp_ms


def test_a_range_is_streamed_and_never_passes_the_end(broker, pull_stub, store_stub):
    put(store_stub, "RawRange", 0, 10)
    responses = pull(pull_stub, "RawRange", 0, 1, end_offset=8, max_msg_nums=3)
    assert [r.status.code for r in responses] == [d.OK] * 3
    assert [r.next_begin_offset for r in responses] == [4, 7, 8]
    assert [rec.queue_offset for r in responses for rec in split(r)] == list(range(1, 8))
    tail = pull(pull_stub, "RawRange", 0, 8, end_offset=50, max_msg_nums=100)
    assert [r.status.code for r in tail] == [d.OK, d.MESSAGE_NOT_FOUND] and tail[-1].next_begin_offset == 10
    [small] = pull(pull_stub, "RawRange", 0, 0, max_msg_nums=100, max_msg_bytes=1)  # one record at least
    assert small.record_count == 1


def test_tag_and_sql_filters(broker, pull_stub, store_stub):
    put(store_stub, "RawFilter", 0, 9, tags=("TagA", "TagB", "TagC"))
    responses = pull(pull_stub, "RawFilter", 0, 0, end_offset=9, expression="TagB || TagC", max_msg_nums=4)
    assert [rec.body for r in responses for rec in split(r)] == [b"m1", b"m2", b"m4", b"m5", b"m7", b"m8"]
    assert responses[-1].next_begin_offset == 9
    responses = pull(
        pull_stub,
        "RawFilter",
        0,
        0,
        end_offset=9,
        filter_type=d.SQL,
        expression="TAGS <> 'TagB' AND UNIQ_KEY IN ('ID0003', 'ID0004', 'ID0006')",
    )
    assert [rec.body for r in responses for rec in split(r)] == [b"m3", b"m6"]
    [none] = pull(pull_stub, "RawFilter", 0, 0, expression="TagZ")
    assert none.status.code == d.MESSAGE_NOT_FOUND and none.next_begin_offset == 9 and not none.records


def test_long_polling_wakes_on_an_arrival(broker, pull_stub, store_stub):
    put(store_stub, "RawPoll", 0, 1)
    timer = threading.Timer(0.7, put, args=(store_stub, "RawPoll", 0, 1), kwargs={"start": 1})
    timer.start()
    started = time.monotonic()
    try:
        responses = pull(pull_stub, "RawPoll", 0, 1, suspend_timeout_millis=8000, timeout=15)
    finally:
        timer.join()
    assert time.monotonic() - started < 6
    assert [r.status.code for r in responses] == [d.OK] and [rec.body for rec in split(responses[0])] == [b"m1"]


@pytest.mark.parametrize(
    "fields, code",
    [
        (dict(topic="NoSuchRawTopic"), d.TOPIC_NOT_FOUND),
        (dict(queue_id=99), d.BAD_REQUEST),
        (dict(queue_offset=-1), d.ILLEGAL_OFFSET),
        (dict(queue_offset=50), d.ILLEGAL_OFFSET),
        (dict(queue_offset=3, end_offset=2), d.BAD_REQUEST),
        (dict(consumer_group="bad group!"), d.ILLEGAL_CONSUMER_GROUP),
        (dict(suspend_timeout_millis=-5), d.ILLEGAL_POLLING_TIME),
        (dict(filter_expression=d.FilterExpression(type=d.SQL, expression="a BETWEEN")), d.ILLEGAL_FILTER_EXPRESSION),
        (dict(filter_expression=d.FilterExpression(type=7, expression="x")), d.BAD_REQUEST),
    ],
)
def test_errors_are_in_band_and_end_the_stream(broker, pull_stub, store_stub, fields, code):
    put(store_stub, "RawBad", 0, 1)
    request = dict(topic="RawBad", queue_id=0, queue_offset=0)
    request.update(fields)
    [response] = list(pull_stub.PullRecords(pb.PullRecordsRequest(**request), timeout=10))
    assert response.status.code == code and response.status.message and not response.records


def test_the_service_is_healthy_and_listed(broker):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="pyrmq.pull.v1.Pull"), timeout=10
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert "pyrmq.pull.v1.Pull" in names
