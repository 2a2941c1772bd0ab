"""The connector's queue reader (pipeline/broker_read.py) against a real broker and store, without
Spark: PullRecords and PullMessage give the same rows, filters apply, ranges are exact, and a
broker without the Pull service is read with PullMessage."""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from tests.support.components import require

require("pyarrow", module_level=True)

from apache.rocketmq.v2 import service_pb2_grpc as s_grpc  # noqa: E402
from pyrmq.store.v1 import store_pb2 as pb  # noqa: E402

from pipeline import client as client_module  # noqa: E402
from pipeline.broker_read import read_range  # noqa: E402
from pipeline.errors import DataLossError  # noqa: E402
from pipeline.options import parse_source_options  # noqa: E402


def put(store_stub, topic: str, queue_id: int, count: int, tags=("TagA",)) -> None:
    """Messages as tests/support/pull_queues.put writes them, then wait for their dispatch."""
    messages = [
        pb.Message(
            topic=topic,
            queue_id=queue_id,
            body=b"m%d" % i,
            properties={"TAGS": tags[i % len(tags)], "KEYS": f"k{i} x", "UNIQ_KEY": f"ID{i:04d}", "color": "red"},
        )
        for i in range(count)
    ]
    results = store_stub.PutMessages(pb.PutMessagesRequest(messages=messages), timeout=30).results
    assert all(r.status == pb.PUT_OK for r in results)
    deadline = time.monotonic() + 10
    request = pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id)
    while store_stub.GetQueueOffsets(request, timeout=10).max_offset < count and time.monotonic() < deadline:
        time.sleep(0.02)


@dataclass(frozen=True)
class Range:
    topic: str
    broker: str
    queue_id: int
    endpoint: str
    start: int
    end: int


def read(endpoint: str, topic: str, start: int, end: int, queue_id: int = 0, **options) -> list[dict]:
    opts = parse_source_options({"endpoints": endpoint, "subscribe": topic, **options}, streaming=False)
    batches = list(read_range(opts, Range(topic, "broker-a", queue_id, endpoint, start, end)))
    return [row for batch in batches for row in batch.to_pylist()]


def comparable(rows: list[dict]) -> list[dict]:
    return [{**row, "properties": sorted(row["properties"])} for row in rows]


@pytest.fixture
def endpoint(broker):
    yield f"127.0.0.1:{broker.port}"
    client_module.close_all()


def test_records_and_messages_read_the_same_rows(endpoint, store_stub):
    put(store_stub, "ReadSame", 0, 1000, tags=("TagA", "TagB"))
    records = read(endpoint, "ReadSame", 0, 1000, pullBatchSize="100")
    messages = read(endpoint, "ReadSame", 0, 1000, pullMethod="messages")
    assert len(records) == 1000 and comparable(records) == comparable(messages)
    assert [r["queueOffset"] for r in records] == list(range(1000))
    first = records[0]
    assert first["body"] == b"m0" and first["tags"] == "TagA" and first["keys"] == ["k0", "x"]
    assert first["messageId"] == "ID0000" and first["properties"] == [("color", "red")]
    assert first["brokerName"] == "broker-a" and first["messageType"] == "NORMAL" and first["deliveryAttempt"] == 1
    part = read(endpoint, "ReadSame", 2, 7, pullBatchSize="2")
    assert [r["queueOffset"] for r in part] == [2, 3, 4, 5, 6]


def test_filters_on_both_methods(endpoint, store_stub):
    put(store_stub, "ReadFilter", 0, 40, tags=("TagA", "TagB", "TagC"))
    for method in ("records", "messages"):
        tagged = read(endpoint, "ReadFilter", 0, 30, pullMethod=method, subExpression="TagB || TagC", pullBatchSize="4")
        assert [r["queueOffset"] for r in tagged] == [i for i in range(30) if i % 3], method
        sql = read(
            endpoint,
            "ReadFilter",
            5,
            40,
            pullMethod=method,
            expressionType="SQL92",
            subExpression="TAGS = 'TagA' AND UNIQ_KEY NOT IN ('ID0006', 'ID0009')",
        )
        assert [r["queueOffset"] for r in sql] == list(range(12, 40, 3)), method


def test_a_queue_that_ends_early_is_data_loss(endpoint, store_stub):
    put(store_stub, "ReadShort", 0, 5)
    with pytest.raises(DataLossError, match="ends at 5, before the planned end 9"):
        read(endpoint, "ReadShort", 0, 9)
    assert len(read(endpoint, "ReadShort", 0, 9, failOnDataLoss="false")) == 5


def test_a_broker_without_the_pull_service_is_read_with_pull_message(broker, store_stub):
    """A server with MessagingService only, as another RocketMQ 5 proxy: UNIMPLEMENTED, then PullMessage."""
    put(store_stub, "ReadFallback", 0, 50)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    s_grpc.add_MessagingServiceServicer_to_server(broker.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        v2_only = f"127.0.0.1:{port}"
        rows = read(v2_only, "ReadFallback", 0, 50)
        assert [r["queueOffset"] for r in rows] == list(range(50))
        assert v2_only in client_module._no_records  # remembered: the next read goes straight to PullMessage
        assert comparable(read(v2_only, "ReadFallback", 10, 20)) == comparable(rows[10:20])
    finally:
        server.stop(None)
        client_module.close_all()


def test_lite_and_priority_messages_through_the_sink_and_back(endpoint, store_stub, topics):
    """The sink's rows with liteTopic / priority arrive as LITE / PRIORITY messages (a priority's
    level is its queue), and both pull methods read the same liteTopic, priority and
    messageType back."""
    import pyarrow as pa

    from pipeline.broker_source import write_batches
    from pipeline.messages import SinkColumns

    topics("SinkLite", message_type="LITE", queue_nums=2)
    topics("SinkPriority", message_type="PRIORITY", queue_nums=4)
    columns = SinkColumns("body", "topic", None, None, None, None, None, "priority", "liteTopic")
    rows = [("SinkLite", f"lite-{i}", f"chat-{i % 3}", None) for i in range(9)]
    rows += [("SinkPriority", f"prio-{i}", None, i % 6) for i in range(12)]
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [r[0] for r in rows],
            "body": [r[1] for r in rows],
            "liteTopic": [r[2] for r in rows],
            "priority": pa.array([r[3] for r in rows], pa.int64()),
        }
    )
    commit = write_batches({"endpoints": endpoint, "sendBatchSize": "4"}, columns, "sink-test", [batch])
    assert commit.messages == len(rows)
    got: dict[str, dict] = {}
    for topic, queues in (("SinkLite", 2), ("SinkPriority", 4)):
        ends = wait_ends(store_stub, topic, queues, sum(r[0] == topic for r in rows))
        for queue_id, end in enumerate(ends):
            records = read(endpoint, topic, 0, end, queue_id=queue_id)
            assert comparable(records) == comparable(read(endpoint, topic, 0, end, queue_id, pullMethod="messages"))
            got.update({row["body"].decode(): row for row in records})
    assert len(got) == len(rows)
    for topic, body, lite, priority in rows:
        row = got[body]
        assert (row["topic"], row["liteTopic"], row["priority"]) == (topic, lite, priority)
        assert row["messageType"] == ("LITE" if lite else "PRIORITY")
        assert row["properties"] == []  # __LITE_TOPIC, its LMQ and offset, the priority: the broker's keys
        if priority is not None:
            assert row["queueId"] == min(priority, 3)  # the level is the queue
    # A lite topic's messages were sent in one SendMessage: one queue, in order.
    for lite in ("chat-0", "chat-1", "chat-2"):
        mine = sorted((r for r in got.values() if r["liteTopic"] == lite), key=lambda r: r["queueOffset"])
        assert len({r["queueId"] for r in mine}) == 1
        assert [r["body"] for r in mine] == [b"lite-%d" % i for i in range(9) if f"chat-{i % 3}" == lite]


def wait_ends(store_stub, topic: str, queues: int, count: int) -> list[int]:
    """Each queue's end, once dispatch has indexed ``count`` messages in all of them."""
    deadline = time.monotonic() + 10
    while True:
        ends = [
            store_stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic, queue_id=q), timeout=10).max_offset
            for q in range(queues)
        ]
        if sum(ends) >= count or time.monotonic() > deadline:
            return ends
        time.sleep(0.02)
