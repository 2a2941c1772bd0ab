"""QueryOffset, PullMessage, UpdateOffset, GetOffset over raw v2 requests (real store and broker)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.consumer import ArrivalHub
from services.broker.pull import OffsetService, PullRequest
from services.runtime.clock import SystemClock
from services.store.client.model import MessageToPut, TopicInfo
from tests.support.pull_queues import put
from tests.support.store_double import StoreDouble
from tests.support.v2_requests import METADATA


def queue(topic, queue_id=0, broker=None):
    mq = d.MessageQueue(topic=d.Resource(name=topic), id=queue_id)
    if broker is not None:
        mq.broker.name = broker
    return mq


def query_offset(v2, topic, queue_id, policy, timestamp_ms=None, **kw):
    request = s.QueryOffsetRequest(message_queue=queue(topic, queue_id, **kw), query_offset_policy=policy)
    if timestamp_ms is not None:
        request.timestamp.CopyFrom(Timestamp(seconds=timestamp_ms // 1000, nanos=timestamp_ms % 1000 * 1_000_000))
    return v2.QueryOffset(request, metadata=METADATA, timeout=10)


def pull(
    v2,
    topic,
    queue_id,
    offset,
    batch_size=32,
    expression=None,
    filter_type=d.TAG,
    polling_s=None,
    group="PullGroup",
    metadata=METADATA,
    timeout=10,
):
    request = s.PullMessageRequest(
        group=d.Resource(name=group), message_queue=queue(topic, queue_id), offset=offset, batch_size=batch_size
    )
    if expression is not None:
        request.filter_expression.CopyFrom(d.FilterExpression(type=filter_type, expression=expression))
    if polling_s is not None:
        request.long_polling_timeout.CopyFrom(Duration(seconds=polling_s))
    replies = list(v2.PullMessage(request, metadata=metadata, timeout=timeout))
    statuses = [r.status for r in replies if r.HasField("status")]
    assert len(statuses) == 1 and replies[0].HasField("status")
    next_offsets = [r.next_offset for r in replies if r.WhichOneof("content") == "next_offset"]
    return statuses[0], [r.message for r in replies if r.HasField("message")], (next_offsets or [None])[-1]


def test_query_offset_policies(broker, v2, store_stub):
    results = put(store_stub, "OffTopic", 2, 5)
    assert query_offset(v2, "OffTopic", 2, d.BEGINNING).offset == 0
    end = query_offset(v2, "OffTopic", 2, d.END)
    assert end.status.code == d.OK and end.offset == 5
    stamp = results[3].store_timestamp_ms
    assert query_offset(v2, "OffTopic", 2, d.TIMESTAMP, stamp).offset == [r.store_timestamp_ms for r in results].index(
        stamp
    )
    assert query_offset(v2, "OffTopic", 2, d.TIMESTAMP, stamp + 10**9).offset == 5
    assert query_offset(v2, "OffTopic", 3, d.END).offset == 0  # a queue never written
    assert query_offset(v2, "OffTopic", 2, d.TIMESTAMP).status.code == d.BAD_REQUEST
    assert query_offset(v2, "OffTopic", 2, d.END, broker="broker-a").offset == 5


def test_pull_reads_a_range_and_reports_the_next_offset(broker, v2, store_stub):
    put(store_stub, "PullTopic", 1, 5)
    status, messages, next_offset = pull(v2, "PullTopic", 1, 0, batch_size=3)
    assert status.code == d.OK and next_offset == 3
    assert [m.system_properties.queue_offset for m in messages] == [0, 1, 2]
    first = messages[0]
    sp = first.system_properties
    assert first.topic.name == "PullTopic" and first.body == b"m0" and dict(first.user_properties) == {"color": "red"}
    assert sp.tag == "TagA" and list(sp.keys) == ["k0", "x"] and sp.message_id == "ID0000"
    assert sp.queue_id == 1 and sp.delivery_attempt == 1 and not sp.HasField("receipt_handle")
    assert sp.store_timestamp.seconds > 0 and sp.store_host and sp.body_digest.checksum
    status, messages, next_offset = pull(v2, "PullTopic", 1, 3)
    assert status.code == d.OK and [m.body for m in messages] == [b"m3", b"m4"] and next_offset == 5
    status, messages, next_offset = pull(v2, "PullTopic", 1, 5)
    assert status.code == d.MESSAGE_NOT_FOUND and not messages and next_offset == 5
    status, _, next_offset = pull(v2, "PullTopic", 1, 50)
    assert status.code == d.ILLEGAL_OFFSET and next_offset == 5


def test_pull_tag_and_sql_filters_skip_ahead(broker, v2, store_stub):
    put(store_stub, "TagPull", 0, 9, tags=("TagA", "TagB", "TagC"))
    status, messages, next_offset = pull(v2, "TagPull", 0, 0, expression="TagB")
    assert status.code == d.OK and [m.body for m in messages] == [b"m1", b"m4", b"m7"] and next_offset == 9
    status, messages, next_offset = pull(v2, "TagPull", 0, 8, expression="TagB")
    assert status.code == d.MESSAGE_NOT_FOUND and next_offset == 9  # m8 is TagC: skipped
    status, messages, next_offset = pull(
        v2, "TagPull", 0, 0, expression="TAGS IN ('TagA', 'TagC') AND color = 'red'", filter_type=d.SQL
    )
    assert status.code == d.OK and [m.body for m in messages] == [b"m0", b"m2", b"m3", b"m5", b"m6", b"m8"]
    assert next_offset == 9
    status, messages, next_offset = pull(v2, "TagPull", 0, 0, expression="color = 'blue'", filter_type=d.SQL)
    assert status.code == d.MESSAGE_NOT_FOUND and not messages and next_offset == 9  # all read, none matched
    status, _, _ = pull(v2, "TagPull", 0, 0, expression="a >", filter_type=d.SQL)
    assert status.code == d.ILLEGAL_FILTER_EXPRESSION


def test_pull_long_polls_until_an_arrival(broker, v2, store_stub):
    put(store_stub, "PollTopic", 0, 1)
    timer = threading.Timer(0.7, put, args=(store_stub, "PollTopic", 0, 1), kwargs={"start": 1})
    timer.start()
    started = time.monotonic()
    try:
        status, messages, next_offset = pull(v2, "PollTopic", 0, 1, polling_s=8, timeout=15)
    finally:
        timer.join()
    assert status.code == d.OK and [m.body for m in messages] == [b"m1"] and next_offset == 2
    assert time.monotonic() - started < 6
    started = time.monotonic()
    status, _, next_offset = pull(v2, "PollTopic", 0, 2, polling_s=1)
    assert status.code == d.MESSAGE_NOT_FOUND and next_offset == 2 and 0.8 < time.monotonic() - started < 5


def test_update_and_get_offset(broker, v2, store_stub):
    put(store_stub, "CommitTopic", 0, 4)
    group = d.Resource(name="Dashboards")
    got = v2.GetOffset(
        s.GetOffsetRequest(group=group, message_queue=queue("CommitTopic")), metadata=METADATA, timeout=10
    )
    assert got.status.code == d.OFFSET_NOT_FOUND
    updated = v2.UpdateOffset(
        s.UpdateOffsetRequest(group=group, message_queue=queue("CommitTopic"), offset=3), metadata=METADATA, timeout=10
    )
    assert updated.status.code == d.OK
    got = v2.GetOffset(
        s.GetOffsetRequest(group=group, message_queue=queue("CommitTopic")), metadata=METADATA, timeout=10
    )
    assert got.status.code == d.OK and got.offset == 3
    committed = store_stub.QueryConsumerOffset(
        pb.QueryConsumerOffsetRequest(group="Dashboards", topic="CommitTopic", queue_id=0), timeout=10
    )
    assert committed.offset == 3
    bad = v2.UpdateOffset(
        s.UpdateOffsetRequest(group=group, message_queue=queue("CommitTopic"), offset=-1), metadata=METADATA, timeout=10
    )
    assert bad.status.code == d.ILLEGAL_OFFSET


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda v2: query_offset(v2, "NoSuchTopic", 0, d.END).status, d.TOPIC_NOT_FOUND),
        (lambda v2: query_offset(v2, "BadQueues", 99, d.END).status, d.BAD_REQUEST),
        (lambda v2: query_offset(v2, "BadQueues", 0, d.END, broker="other-broker").status, d.BAD_REQUEST),
        (lambda v2: pull(v2, "BadQueues", 0, -1)[0], d.ILLEGAL_OFFSET),
        (lambda v2: pull(v2, "BadQueues", 0, 0, group="bad group!")[0], d.ILLEGAL_CONSUMER_GROUP),
        (lambda v2: pull(v2, "BadQueues", 0, 0, metadata=())[0], d.CLIENT_ID_REQUIRED),
        (
            lambda v2: v2.QueryOffset(s.QueryOffsetRequest(message_queue=queue("BadQueues")), timeout=10).status,
            d.CLIENT_ID_REQUIRED,
        ),
    ],
)
def test_errors_are_in_band(broker, v2, store_stub, call, code):
    put(store_stub, "BadQueues", 0, 1)
    assert call(v2).code == code
    assert query_offset(v2, "NoSuchTopic", 0, d.END).status.code == d.TOPIC_NOT_FOUND  # still not auto-created


class _Topics:
    def get(self, name, create=None):
        return TopicInfo(name=name, read_queue_nums=4, write_queue_nums=4, perm=6, message_type="NORMAL")


RESERVED_HOURS = 1
HOUR_MS = 3_600_000


@pytest.fixture
def retained(tmp_path, clock) -> Iterator[StoreDouble]:
    """A real store that keeps CommitLog segments (4 KiB: a few records each) for an hour, its
    retention run by hand (the background pass never comes during a test)."""
    double = StoreDouble(
        tmp_path / "retained",
        clock,
        commitlog_file_size_bytes=4096,
        file_reserved_time_hours=RESERVED_HOURS,
        clean_resource_interval_ms=HOUR_MS,
    )
    yield double
    double.close()


def test_pull_below_the_min_offset_is_illegal_offset_with_the_min(retained, clock):
    store = retained
    stored = [store.append(MessageToPut("T", 0, b"%04d" % i + b"x" * 1000, {})) for i in range(20)]
    # Segments are written now (their mtime is the wall clock): move the store's clock past the
    # reserved time, and retention deletes every segment but the last.
    clock.set_ms(time.time_ns() // 1_000_000 + RESERVED_HOURS * HOUR_MS + 60_000)
    assert store.file_store.clean.run_once() > 0
    min_offset, max_offset = store.queue_offsets("T", 0)
    survivors = [m for m in stored if m.phy_offset >= store.file_store.commitlog.min_offset]
    assert min_offset == survivors[0].queue_offset > 3 and max_offset == 20  # queue 0 lost 0..min-1
    service = OffsetService(store, _Topics(), ArrivalHub(), SystemClock(), "broker-a")
    result = service.pull(PullRequest(group="G", topic="T", queue_id=0, offset=3))
    assert result.code == d.ILLEGAL_OFFSET and result.next_offset == min_offset
    assert f"min offset {min_offset}" in result.message
