"""The "rocketmq" source and sink against a real store + broker (subprocesses on 127.0.0.1)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from pipeline.client import Client, RouteQueue
from pipeline.offsets import to_json
from tests.support.topics import create_topics_at

pytestmark = pytest.mark.spark
BROKER = "broker-a"
CHUNK = 8  # messages per SendMessage: the broker puts one request in one queue, round robin


def send(endpoint: str, topic: str, count: int, start: int = 0, tags=("TagA",)) -> list[str]:
    client = Client((endpoint,))
    ids = []
    for first in range(start, start + count, CHUNK):
        batch = []
        for i in range(first, min(start + count, first + CHUNK)):
            sp = d.SystemProperties(
                message_id=f"T-{topic}-{i:05d}",
                message_type=d.NORMAL,
                body_encoding=d.IDENTITY,
                tag=tags[i % len(tags)],
                keys=[f"key-{i}"],
            )
            batch.append(
                d.Message(
                    topic=d.Resource(name=topic),
                    body=b"body-%d" % i,
                    system_properties=sp,
                    user_properties={"n": str(i)},
                )
            )
        client.send(batch)
        ids += [m.system_properties.message_id for m in batch]
    deadline = time.monotonic() + 20  # the store dispatches to ConsumeQueues just after the put
    while sum(end_offsets(endpoint, topic).values()) < start + count and time.monotonic() < deadline:
        time.sleep(0.05)
    return ids


def end_offsets(endpoint: str, topic: str) -> dict:
    client = Client((endpoint,))
    return {(q.topic, q.broker, q.queue_id): client.query_offset(q, d.END) for q in client.route(topic)}


def source(spark, endpoint, **options):
    reader = spark.read.format("rocketmq").option("endpoints", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_equals_what_the_official_client_sent(spark, cluster, tmp_path):
    from tests.support.official_client import run_client

    create_topics_at(cluster, "SparkRead")

    sent_from = datetime.now(UTC)
    specs = [
        {
            "topic": "SparkRead",
            "body": f"msg-{i}",
            "tag": "TagA" if i % 2 else "TagB",
            "keys": [f"k{i}", "kk"],
            "properties": {"n": str(i), "color": "red"},
        }
        for i in range(30)
    ]
    results, _ = run_client(tmp_path, cluster, specs, topics=("SparkRead",))
    sent_until = datetime.now(UTC)
    assert all(r["ok"] for r in results)
    by_id = {r["message_id"]: spec for r, spec in zip(results, specs)}
    rows = source(spark, cluster, subscribe="SparkRead").collect()
    assert len(rows) == 30 and {r["messageId"] for r in rows} == set(by_id)
    for row in rows:
        spec = by_id[row["messageId"]]
        assert row["body"] == spec["body"].encode() and row["tags"] == spec["tag"]
        assert sorted(row["keys"]) == sorted(spec["keys"])  # the client keeps keys in a set
        assert row["properties"] == spec["properties"] and row["topic"] == "SparkRead" and row["brokerName"] == BROKER
        assert row["messageType"] == "NORMAL" and row["deliveryAttempt"] == 1 and row["messageGroup"] is None
        assert sent_from.timestamp() - 5 <= row["storeTimestamp"].timestamp() <= sent_until.timestamp() + 5
        assert row["storeHost"] and row["bornHost"]
    per_queue: dict[int, list[int]] = {}
    for row in rows:
        per_queue.setdefault(row["queueId"], []).append(row["queueOffset"])
    ends = end_offsets(cluster, "SparkRead")
    for queue_id, offsets in per_queue.items():
        assert sorted(offsets) == list(range(ends[("SparkRead", BROKER, queue_id)]))
    tagged = source(spark, cluster, subscribe="SparkRead", subExpression="TagA").collect()
    assert sorted(r["body"] for r in tagged) == sorted(s["body"].encode() for s in specs if s["tag"] == "TagA")


def test_offset_ranges_are_exact(spark, cluster):
    create_topics_at(cluster, "SparkRange")
    send(cluster, "SparkRange", 64)
    ends = end_offsets(cluster, "SparkRange")
    assert sum(ends.values()) == 64 and ends[("SparkRange", BROKER, 0)] >= 5
    rows = source(
        spark,
        cluster,
        assign='{"SparkRange":{"broker-a":[0,1]}}',
        startingOffsets='{"SparkRange":{"broker-a":{"1":-2,"0":2}}}',
        endingOffsets='{"SparkRange":{"broker-a":{"0":5,"1":3}}}',
    ).collect()
    assert sorted((r["queueId"], r["queueOffset"]) for r in rows) == [(0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]
    two_level = source(
        spark,
        cluster,
        assign='{"SparkRange":[0]}',
        startingOffsets='{"SparkRange":{"0":1}}',
        endingOffsets='{"SparkRange":{"0":2}}',
    ).collect()
    assert [(r["queueId"], r["queueOffset"]) for r in two_level] == [(0, 1)]
    everything = source(spark, cluster, subscribe="SparkRange", minPartitions="20")
    assert everything.rdd.getNumPartitions() >= 20 and everything.count() == 64
    future = int(time.time() * 1000) + 3_600_000
    assert source(spark, cluster, subscribe="SparkRange", startingTimestamp=str(future)).count() == 0
    for options, message in [
        ({"startingOffsets": "latest"}, "'startingOffsets': 'latest' is not allowed"),
        ({"endingOffsets": '{"SparkRange":{"broker-a":{"0":-2}}}'}, "-2 \\(earliest\\)"),
        ({"startingOffsets": '{"Other":{"broker-a":{"0":1}}}'}, "not subscribed"),
    ]:
        with pytest.raises(Exception, match=message):
            source(spark, cluster, subscribe="SparkRange", **options).collect()


def stream(spark, endpoint, checkpoint, out, **options):
    reader = spark.readStream.format("rocketmq").option("endpoints", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def get_offset(endpoint: str, group: str, queue: RouteQueue) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        response = s_grpc.MessagingServiceStub(channel).GetOffset(
            s.GetOffsetRequest(
                group=d.Resource(name=group),
                message_queue=d.MessageQueue(topic=d.Resource(name=queue.topic), id=queue.queue_id),
            ),
            metadata=(("x-mq-client-id", "tests"),),
            timeout=10,
        )
    assert response.status.code == d.OK, response.status
    return response.offset


def test_stream_rate_limit_and_restart_without_duplicates(spark, cluster, tmp_path):
    create_topics_at(cluster, "SparkStream")
    send(cluster, "SparkStream", 100)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    options = dict(
        subscribe="SparkStream", startingOffsets="earliest", maxOffsetsPerTrigger="30", consumerGroup="spark-lag"
    )
    query = stream(spark, cluster, checkpoint, out, **options)
    assert query.awaitTermination(180) is not False and query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100 and max(sizes) <= 30 and len(sizes) >= 4
    ends = end_offsets(cluster, "SparkStream")
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == json.loads(to_json(ends))
    queue = Client((cluster,)).route("SparkStream")[0]
    # Spark commits a batch's end to the source when it plans the next batch: the group's offset
    # trails the last micro-batch (monitoring only; the checkpoint is the truth).
    assert 0 < get_offset(cluster, "spark-lag", queue) <= ends[(queue.topic, queue.broker, queue.queue_id)]

    send(cluster, "SparkStream", 30, start=100)
    again = stream(spark, cluster, checkpoint, out, **options)
    assert again.awaitTermination(180) is not False and again.exception() is None
    assert sum(p["numInputRows"] for p in again.recentProgress) == 30
    written = spark.read.parquet(str(out))
    assert written.count() == 130
    assert written.groupBy("brokerName", "queueId", "queueOffset").count().where("count > 1").count() == 0
    assert {r[0] for r in written.select("body").collect()} == {b"body-%d" % i for i in range(130)}


def test_idle_stream_runs_no_empty_batches(spark, cluster, tmp_path):
    create_topics_at(cluster, "SparkIdle")
    send(cluster, "SparkIdle", 16)
    checkpoint = tmp_path / "checkpoint"
    query = (
        spark.readStream.format("rocketmq")
        .option("endpoints", cluster)
        .option("subscribe", "SparkIdle")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        logged = len(list((checkpoint / "offsets").iterdir()))
        time.sleep(1.5)  # ~15 triggers with nothing new
        assert len(list((checkpoint / "offsets").iterdir())) == logged
        send(cluster, "SparkIdle", 8, start=16)
        query.processAllAvailable()
        assert len(list((checkpoint / "offsets").iterdir())) > logged
    finally:
        query.stop()


def test_sink_batch_and_stream_round_trip(spark, cluster, tmp_path):
    from pyspark.sql import functions as F

    create_topics_at(cluster, "SinkOut", "SinkStreamOut", "SinkStreamIn", "NotUsed")

    rows = [(f"payload-{i}", "TagS", [f"k{i}"], {"i": str(i)}, "NotUsed") for i in range(50)]
    df = spark.createDataFrame(
        rows, "body string, tags string, keys array<string>, properties map<string,string>, topic string"
    )
    df.write.format("rocketmq").option("endpoints", cluster).option("topic", "SinkOut").mode("append").save()
    back = source(spark, cluster, subscribe="SinkOut").dropDuplicates(["messageId"]).collect()
    assert sorted(r["body"].decode() for r in back) == sorted(r[0] for r in rows)
    assert all(r["tags"] == "TagS" and r["properties"] == {"i": r["body"].decode().split("-")[1]} for r in back)
    assert all(r["keys"] == [f"k{r['properties']['i']}"] for r in back)
    assert source(spark, cluster, subscribe="NotUsed").count() == 0  # the option overrode the column
    with pytest.raises(Exception, match="'body' column"):
        spark.createDataFrame([("x",)], "payload string").write.format("rocketmq").option("endpoints", cluster).option(
            "topic", "SinkOut"
        ).mode("append").save()

    send(cluster, "SinkStreamIn", 40)
    query = (
        spark.readStream.format("rocketmq")
        .option("endpoints", cluster)
        .option("subscribe", "SinkStreamIn")
        .option("startingOffsets", "earliest")
        .load()
        .select("body", "tags", "keys", "properties", F.lit("SinkStreamOut").alias("topic"))
        .writeStream.format("rocketmq")
        .option("endpoints", cluster)
        .option("checkpointLocation", str(tmp_path / "sink-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180) is not False and query.exception() is None
    copied = source(spark, cluster, subscribe="SinkStreamOut").dropDuplicates(["messageId"])
    assert sorted(r[0] for r in copied.select("body").collect()) == sorted(b"body-%d" % i for i in range(40))


def test_lite_and_priority_rows_round_trip(spark, cluster):
    """Sink rows with liteTopic / priority are sent as LITE / PRIORITY messages; the source reads
    them back with those columns and message types (issue 18)."""
    create_topics_at(cluster, "SparkLite", message_type="LITE", queue_nums=2)
    create_topics_at(cluster, "SparkPriority", message_type="PRIORITY", queue_nums=4)
    rows = [(f"lite-{i}", "SparkLite", f"chat-{i % 3}", None) for i in range(12)]
    rows += [(f"prio-{i}", "SparkPriority", None, i % 5) for i in range(10)]
    df = spark.createDataFrame(rows, "body string, topic string, liteTopic string, priority int")
    df.write.format("rocketmq").option("endpoints", cluster).mode("append").save()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sum(
        sum(end_offsets(cluster, t).values()) for t in ("SparkLite", "SparkPriority")
    ) < len(rows):
        time.sleep(0.05)
    back = source(spark, cluster, subscribe="SparkLite,SparkPriority").collect()
    got = {r["body"].decode(): r for r in back}
    assert len(back) == len(got) == len(rows)
    for body, topic, lite, priority in rows:
        row = got[body]
        assert (row["topic"], row["liteTopic"], row["priority"]) == (topic, lite, priority)
        assert row["messageType"] == ("LITE" if lite else "PRIORITY") and row["properties"] == {}
    per_lite = source(spark, cluster, subscribe="SparkLite").groupBy("liteTopic").count().collect()
    assert {r["liteTopic"]: r["count"] for r in per_lite} == {"chat-0": 4, "chat-1": 4, "chat-2": 4}
    both = spark.createDataFrame(
        [("x", "SparkLite", "chat-0", 1)], "body string, topic string, liteTopic string, priority int"
    )
    with pytest.raises(Exception, match="has both priority and liteTopic"):
        both.write.format("rocketmq").option("endpoints", cluster).mode("append").save()


@pytest.fixture(scope="module")
def lossy_cluster(spark, tmp_path_factory):
    """A store whose first CommitLog segment is gone, as after retention: queue 0 of LossTopic
    starts past offset 0."""
    from services.domain.format.commitlog_format import MessageRecord
    from services.runtime.clock import SystemClock
    from services.store.config import StoreConfig
    from services.store.store import FileStore
    from tests.support.processes import start_cluster

    data_dir = tmp_path_factory.mktemp("lossy")
    store = FileStore(StoreConfig(store_root=data_dir / "store", commitlog_file_size_bytes=1 << 20), SystemClock())
    store.start()
    try:
        for first in range(0, 2400, 400):
            store.put_messages(
                [
                    MessageRecord(
                        topic="LossTopic",
                        queue_id=0,
                        body=b"%06d" % i + b"x" * 1000,
                        properties={"UNIQ_KEY": f"L{i:06d}"},
                    )
                    for i in range(first, first + 400)
                ]
            )
        store.reput.run_once()
    finally:
        store.shutdown()
    (data_dir / "store" / "commitlog" / f"{0:020d}").unlink()
    started: list = []
    try:
        yield start_cluster(data_dir, started)
    finally:
        for process in started:
            process.kill()


def test_fail_on_data_loss_both_ways(spark, lossy_cluster, tmp_path):
    queue = RouteQueue("LossTopic", BROKER, 0, lossy_cluster)
    earliest = Client((lossy_cluster,)).query_offset(queue, d.BEGINNING)
    end = Client((lossy_cluster,)).query_offset(queue, d.END)
    assert 0 < earliest < end == 2400
    options = dict(assign='{"LossTopic":{"broker-a":[0]}}', startingOffsets='{"LossTopic":{"broker-a":{"0":0}}}')
    with pytest.raises(Exception, match="were removed"):
        source(spark, lossy_cluster, **options).count()
    rows = source(spark, lossy_cluster, failOnDataLoss="false", **options).select("queueOffset")
    assert rows.count() == end - earliest and rows.agg({"queueOffset": "min"}).first()[0] == earliest

    failing = stream(spark, lossy_cluster, tmp_path / "c1", tmp_path / "o1", **options)
    with pytest.raises(Exception, match="offsets 0..[0-9]+ were removed"):
        failing.awaitTermination(120)
    tolerant = stream(spark, lossy_cluster, tmp_path / "c2", tmp_path / "o2", failOnDataLoss="false", **options)
    assert tolerant.awaitTermination(120) is not False and tolerant.exception() is None
    assert spark.read.parquet(str(tmp_path / "o2")).count() == end - earliest


def rows_by_position(rows) -> list[dict]:
    return sorted((r.asDict() for r in rows), key=lambda r: (r["topic"], r["queueId"], r["queueOffset"]))


def test_stream_through_pull_records_equals_pull_message_and_sql_filters(spark, cluster, tmp_path):
    create_topics_at(cluster, "SparkRecords")
    send(cluster, "SparkRecords", 60, tags=("TagA", "TagB", "TagC"))
    fifo = [
        d.Message(
            topic=d.Resource(name="SparkRecords"),
            body=b"fifo-%d" % i,
            user_properties={"n": str(100 + i)},
            system_properties=d.SystemProperties(
                message_id=f"F-{i:04d}", message_type=d.FIFO, body_encoding=d.IDENTITY, message_group=f"g{i % 2}"
            ),
        )
        for i in range(6)
    ]
    Client((cluster,)).send(fifo)
    deadline = time.monotonic() + 20
    while sum(end_offsets(cluster, "SparkRecords").values()) < 66 and time.monotonic() < deadline:
        time.sleep(0.05)
    query = stream(
        spark,
        cluster,
        tmp_path / "checkpoint",
        tmp_path / "out",
        subscribe="SparkRecords",
        startingOffsets="earliest",
        pullBatchSize="7",
    )
    assert query.awaitTermination(180) is not False and query.exception() is None
    streamed = rows_by_position(spark.read.parquet(str(tmp_path / "out")).collect())
    pulled = rows_by_position(source(spark, cluster, subscribe="SparkRecords", pullMethod="messages").collect())
    assert len(streamed) == 66 and streamed == pulled
    groups = sorted(r["messageGroup"] for r in streamed if r["messageType"] == "FIFO")
    assert groups == ["g0", "g0", "g0", "g1", "g1", "g1"]
    sql = dict(subscribe="SparkRecords", expressionType="SQL92", subExpression="n >= 50 AND TAGS <> 'TagB'")
    expected = sorted(
        r["messageId"] for r in streamed if int(r["properties"]["n"]) >= 50 and r["tags"] not in ("TagB", None)
    )
    for method in ("records", "messages"):
        assert sorted(r["messageId"] for r in source(spark, cluster, pullMethod=method, **sql).collect()) == expected
    with pytest.raises(Exception, match="'subExpression': not an SQL92 condition"):
        source(spark, cluster, subscribe="SparkRecords", expressionType="SQL92", subExpression="n >").collect()


def test_subscribe_pattern_follows_matching_topics(spark, cluster, tmp_path):
    create_topics_at(cluster, "PatOrders1", "PatOrders2", "PatOther")
    send(cluster, "PatOrders1", 16)
    send(cluster, "PatOrders2", 8)
    send(cluster, "PatOther", 8)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    options = dict(subscribePattern="PatOrders[0-9]+", startingOffsets="earliest")
    query = stream(spark, cluster, checkpoint, out, **options)
    assert query.awaitTermination(180) is not False and query.exception() is None
    counts = {r["topic"]: r["count"] for r in spark.read.parquet(str(out)).groupBy("topic").count().collect()}
    assert counts == {"PatOrders1": 16, "PatOrders2": 8}
    create_topics_at(cluster, "PatOrders3")
    send(cluster, "PatOrders3", 8)  # a topic that starts matching later: read from its start
    send(cluster, "PatOrders1", 8, start=16)
    again = stream(spark, cluster, checkpoint, out, **options)
    assert again.awaitTermination(180) is not False and again.exception() is None
    counts = {r["topic"]: r["count"] for r in spark.read.parquet(str(out)).groupBy("topic").count().collect()}
    assert counts == {"PatOrders1": 24, "PatOrders2": 8, "PatOrders3": 8}
    assert source(spark, cluster, subscribePattern="PatO.*").select("topic").distinct().count() == 4
    with pytest.raises(Exception, match="exactly one of the options.*got 'subscribe' and 'subscribePattern'"):
        source(spark, cluster, subscribe="PatOther", subscribePattern="Pat.*").collect()
