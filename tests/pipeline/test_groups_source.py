"""The "rocketmq" source over a topic spread on two broker groups (issue 17), on ``pyrmq up
--groups 2``: the route lists both groups' queues, offsets and PullRecords go to the group each
queue names, a batch read returns exactly the asked ranges of both groups, and a stream restarted
from its checkpoint reads every message of both groups once."""

from __future__ import annotations

import re
import signal
import time

import pytest
from apache.rocketmq.v2 import definition_pb2 as d

from pipeline.client import Client
from tests.support.processes import Process, pyrmq_up_command

pytestmark = [pytest.mark.spark, pytest.mark.needs("etcd")]
READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
TOPIC = "SparkGroups"
GROUPS = ("broker-a", "broker-b")


@pytest.fixture(scope="module")
def endpoint(spark, tmp_path_factory):
    """``pyrmq up --groups 2`` for this module (after the SparkSession: the JVM is up first)."""
    tmp = tmp_path_factory.mktemp("groups")
    up = Process(pyrmq_up_command(tmp / "data", "--groups", "2", "--create-topic", TOPIC), tmp)
    try:
        yield up.wait_line(READY)["clients"]
    finally:
        assert up.stop(signal.SIGTERM) == 0, up.log()


def send(endpoint: str, count: int, start: int = 0) -> None:
    """``count`` messages, one per SendMessage: the broker alternates the groups' queues."""
    client = Client((endpoint,))
    for i in range(start, start + count):
        properties = d.SystemProperties(message_id=f"G-{i:05d}", message_type=d.NORMAL, body_encoding=d.IDENTITY)
        client.send([d.Message(topic=d.Resource(name=TOPIC), body=b"body-%d" % i, system_properties=properties)])
    deadline = time.monotonic() + 20  # dispatched to the ConsumeQueues just after the put
    while sum(end_offsets(endpoint).values()) < start + count:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def end_offsets(endpoint: str) -> dict[tuple[str, int], int]:
    client = Client((endpoint,))
    return {(q.broker, q.queue_id): client.query_offset(q, d.END) for q in client.route(TOPIC)}


def test_batch_ranges_and_a_restarted_stream_over_two_groups(spark, endpoint, tmp_path) -> None:
    send(endpoint, 64)
    ends = end_offsets(endpoint)
    assert {broker for broker, _ in ends} == set(GROUPS) and sum(ends.values()) == 64
    assert all(ends[(group, 0)] >= 3 for group in GROUPS)

    rows = (
        spark.read.format("rocketmq")
        .option("endpoints", endpoint)
        .option("assign", f'{{"{TOPIC}":{{"broker-a":[0],"broker-b":[0,1]}}}}')
        .option("startingOffsets", f'{{"{TOPIC}":{{"broker-a":{{"0":1}},"broker-b":{{"0":0,"1":2}}}}}}')
        .option("endingOffsets", f'{{"{TOPIC}":{{"broker-a":{{"0":3}},"broker-b":{{"0":2,"1":3}}}}}}')
        .load()
        .collect()
    )
    assert sorted((r["brokerName"], r["queueId"], r["queueOffset"]) for r in rows) == [
        ("broker-a", 0, 1),
        ("broker-a", 0, 2),
        ("broker-b", 0, 0),
        ("broker-b", 0, 1),
        ("broker-b", 1, 2),
    ]

    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def stream() -> None:
        query = (
            spark.readStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "24")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180) is not False and query.exception() is None

    stream()
    send(endpoint, 16, start=64)
    stream()  # from the checkpoint: only the 16 new ones
    written = spark.read.parquet(str(out))
    assert written.count() == 80
    assert written.groupBy("brokerName", "queueId", "queueOffset").count().where("count > 1").count() == 0
    assert {r[0] for r in written.select("brokerName").distinct().collect()} == set(GROUPS)
    assert {r[0] for r in written.select("body").collect()} == {b"body-%d" % i for i in range(80)}
