"""Spark pipeline benchmark: the commitlog source's decode rate, streaming reads from a live
broker, and the sink. Prints one line per figure.

    python bench/spark_bench.py [--only commitlog stream sink] [--gib 1.0] [--messages 200000]
                                [--data-dir DIR] [--master local[2]]

* ``commitlog``: a store root of >= ``--gib`` GiB of CommitLog written by the store's own
  FileStore (1 GiB segments, broker-like properties: TAGS, KEYS, UNIQ_KEY, CLUSTER, the
  whole-record CRC trailer; 100-byte bodies), kept in ``--data-dir`` between runs. Then
  ``spark.read.format("rocketmq-commitlog")`` into the ``noop`` sink: all columns, then a
  narrow schema (the columns a stats/rebuild job reads), one partition per segment and with
  ``splitSize`` 128 MiB. Also the decoder alone in this process, for reference.
* ``stream``: a store and a broker (child processes) with ``--messages`` messages in 8 queues,
  read by ``readStream.format("rocketmq")`` with ``Trigger.AvailableNow`` into ``noop``: with
  PullRecords (``pullMethod`` records, the default; two batch sizes) and, once, with v2
  PullMessage (``pullMethod`` messages) for comparison; and a batch read of the same. The
  cluster's directory is removed afterwards.
* ``sink``: ``--messages`` rows written with ``write.format("rocketmq")``.

Targets (issue 6): commitlog source >= 500,000 records/s on local[2]; streaming read >= 20,000
msgs/s. Times exclude the SparkSession start; each Spark figure is the best of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

NARROW = (
    "commitLogOffset bigint, totalSize int, queueId int, queueOffset bigint, sysFlag int, "
    "storeTimestamp timestamp, topic string"
)


def session(master: str):
    from pyspark.sql import SparkSession

    import pipeline

    spark = (
        SparkSession.builder.master(master)
        .appName("spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def tree_cpu_s(pids=None) -> float:
    """User + system CPU seconds of this process and its descendants (the JVM, the Python
    workers it forks, broker and store child processes), read from /proc."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    roots = set(pids or [os.getpid()])
    total = 0.0
    for pid in cpu:
        walk = pid
        while walk > 1 and walk not in roots:
            walk = parents.get(walk, 0)
        if walk in roots:
            total += cpu[pid]
    return total


LAST_CPU_S = [0.0]


def best(runs: int, action) -> float:
    """Best wall time of ``runs``; LAST_CPU_S[0] gets that run's CPU seconds (process tree)."""
    times = []
    for _ in range(runs):
        cpu = tree_cpu_s()
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started, tree_cpu_s() - cpu))
    wall, LAST_CPU_S[0] = min(times)
    return wall


def cpu_note(count: int) -> str:
    per = LAST_CPU_S[0] / count * 1e6
    return f"{per:.2f} CPU-µs each, so {2e6 / per:,.0f}/s on 2 free cores" if per else ""


# -- commitlog --------------------------------------------------------------------------------


def write_store(root: Path, gib: float) -> tuple[int, int]:
    """(records, bytes) of a store root with >= gib GiB of CommitLog (reused if present)."""
    from services.domain.format.commitlog_format import MessageRecord
    from services.runtime.clock import SystemClock
    from services.store.config import StoreConfig
    from services.store.store import FileStore

    marker = root / "bench-records"
    if marker.exists():
        records, size = map(int, marker.read_text().split())
        if size >= gib * (1 << 30):
            return records, size
    store = FileStore(StoreConfig(store_root=root, message_index_enable=False), SystemClock())
    store.start()
    records = 0
    started = time.perf_counter()
    target = int(gib * (1 << 30)) + (1 << 20)
    try:
        while store.commitlog.max_offset < target:
            batch = [
                MessageRecord(
                    topic=f"BenchTopic{(records + i) % 4}",
                    queue_id=(records + i) % 8,
                    body=b"%010d" % (records + i) + b"x" * 90,
                    properties={
                        "TAGS": "TagA" if i % 2 else "TagB",
                        "KEYS": f"order-{records + i}",
                        "UNIQ_KEY": f"7F000001{records + i:024X}",
                        "CLUSTER": "DefaultCluster",
                        "WAIT": "true",
                    },
                    born_timestamp_ms=1_700_000_000_000 + records + i,
                )
                for i in range(1000)
            ]
            store.put_messages(batch)
            records += len(batch)
        store.reput.run_once()
        size = store.commitlog.max_offset
    finally:
        store.shutdown()
    marker.write_text(f"{records} {size}")
    print(f"wrote {records:,} records, {size / (1 << 20):,.0f} MiB in {time.perf_counter() - started:.0f} s")
    return records, size


def bench_commitlog(spark, args) -> None:
    from pipeline.decode import read_segment, segment_files

    root = Path(args.data_dir) / "commitlog-store" / "store"
    records, size = write_store(root, args.gib)
    mib = size / (1 << 20)
    print(
        f"commitlog: {records:,} records, {mib:,.0f} MiB ({size / records:.0f} B/record), "
        f"{len(segment_files(root))} segments"
    )
    start, path = segment_files(root)[0]
    decoded, started, cpu = 0, time.perf_counter(), time.process_time()
    for batch in read_segment(path, start):
        decoded += batch.num_rows
        if decoded >= 1_000_000:
            break
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"  decoder alone (this process, all columns): {decoded / elapsed:,.0f} records/s "
        f"({cpu / decoded * 1e6:.2f} CPU-µs each)"
    )
    cases = [
        ("all columns, 1 partition/segment", None, {}),
        ("all columns, splitSize 128 MiB", None, {"splitSize": str(128 << 20)}),
        ("narrow schema, splitSize 128 MiB", NARROW, {"splitSize": str(128 << 20)}),
    ]
    for name, schema, options in cases:

        def run():
            reader = spark.read.format("rocketmq-commitlog")
            if schema:  # noqa: B023
                reader = reader.schema(schema)  # noqa: B023
            for key, value in options.items():  # noqa: B023
                reader = reader.option(key, value)
            reader.load(str(root)).write.format("noop").mode("overwrite").save()

        elapsed = best(args.runs, run)
        print(
            f"  spark {args.master}, {name}: {records / elapsed:,.0f} records/s, {mib / elapsed:,.0f} MiB/s "
            f"({elapsed:.1f} s; {cpu_note(records)})"
        )


# -- live broker --------------------------------------------------------------------------------


def start_cluster(data_dir: Path):
    from tests.support.processes import Process, start_store

    started: list = []
    _, ready = start_store(started, data_dir, ROOT)
    broker = Process(
        [
            sys.executable,
            "-m",
            "services.broker",
            "--port",
            "0",
            "--metrics-port",
            "-1",
            "--store-address",
            ready["grpc"],
            "--auto-create-topic",  # the bench's topics are created by their first send
        ],
        ROOT,
    )
    started.append(broker)
    endpoint = broker.wait_line(re.compile(r"^pyrmq-broker ready .*endpoint=(?P<endpoint>\S+) tls="))["endpoint"]
    return endpoint, started


def fill(endpoint: str, topic: str, count: int) -> float:
    from apache.rocketmq.v2 import definition_pb2 as d

    from pipeline.client import Client

    client = Client((endpoint,))

    def chunk(first: int) -> None:
        client.send(
            [
                d.Message(
                    topic=d.Resource(name=topic),
                    body=b"%010d" % i + b"x" * 90,
                    system_properties=d.SystemProperties(
                        message_id=f"B{i:031d}",
                        message_type=d.NORMAL,
                        body_encoding=d.IDENTITY,
                        tag="TagA",
                        keys=[f"k{i}"],
                    ),
                )
                for i in range(first, min(count, first + 256))
            ]
        )

    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(chunk, range(0, count, 256)))
    return count / (time.perf_counter() - started)


def bench_stream(spark, args) -> None:
    cluster_dir = Path(tempfile.mkdtemp(dir=args.data_dir))
    endpoint, processes = start_cluster(cluster_dir)
    try:
        rate = fill(endpoint, "StreamBench", args.messages)
        time.sleep(1)
        print(f"stream: {args.messages:,} messages of 100 B sent at {rate:,.0f} msgs/s (SendMessage, 256 per call)")
        for method, pull in (("records", "256"), ("records", "1024"), ("messages", "1024")):

            def run():
                with tempfile.TemporaryDirectory(dir=args.data_dir) as checkpoint:
                    query = (
                        spark.readStream.format("rocketmq")
                        .option("endpoints", endpoint)
                        .option("subscribe", "StreamBench")
                        .option("startingOffsets", "earliest")
                        .option("pullMethod", method)  # noqa: B023 - runs within this iteration
                        .option("pullBatchSize", pull)  # noqa: B023 - runs within this iteration
                        .load()
                        .writeStream.format("noop")
                        .option("checkpointLocation", checkpoint)
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                    rows = sum(p["numInputRows"] for p in query.recentProgress)
                    assert rows == args.messages, rows

            elapsed = best(args.runs if method == "records" else 1, run)
            print(
                f"  readStream availableNow, pullMethod {method}, pullBatchSize {pull}: "
                f"{args.messages / elapsed:,.0f} msgs/s ({elapsed:.1f} s; {cpu_note(args.messages)}, "
                "broker and store included)"
            )
        elapsed = best(
            args.runs,
            lambda: (
                spark.read.format("rocketmq")
                .option("endpoints", endpoint)
                .option("subscribe", "StreamBench")
                .option("pullBatchSize", "1024")
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            ),
        )
        print(
            f"  batch read, pullMethod records, pullBatchSize 1024: {args.messages / elapsed:,.0f} msgs/s "
            f"({elapsed:.1f} s; {cpu_note(args.messages)}, broker and store included)"
        )
        if "sink" in args.only:
            bench_sink(spark, args, endpoint)
    finally:
        for process in processes:
            process.kill()
        shutil.rmtree(cluster_dir, ignore_errors=True)


def bench_sink(spark, args, endpoint: str) -> None:
    from pyspark.sql import functions as F

    df = spark.range(args.messages).select(
        F.concat(F.lpad(F.col("id").cast("string"), 10, "0"), F.lit("x" * 90)).alias("body"),
        F.lit("TagS").alias("tags"),
    )
    df = df.repartition(2).cache()
    df.count()
    for size in ("256",):
        elapsed = best(
            1,
            lambda: (
                df.write.format("rocketmq")
                .option("endpoints", endpoint)
                .option("topic", "SinkBench")
                .option("sendBatchSize", size)  # noqa: B023 - runs within this iteration
                .mode("append")
                .save()
            ),
        )
        print(
            f"sink: write.format('rocketmq'), {args.messages:,} rows, sendBatchSize {size}: "
            f"{args.messages / elapsed:,.0f} msgs/s ({elapsed:.1f} s; {cpu_note(args.messages)}, "
            "broker and store included)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=["commitlog", "stream", "sink"])
    parser.add_argument("--gib", type=float, default=1.0, help="CommitLog size for the commitlog figure")
    parser.add_argument("--messages", type=int, default=200_000, help="messages for stream and sink")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--data-dir",
        default=str(Path(tempfile.gettempdir()) / "pyrmq-spark-bench"),
        help="kept between runs (default: TMPDIR/pyrmq-spark-bench)",
    )
    args = parser.parse_args()
    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    spark = session(args.master)
    print(
        f"SparkSession {args.master} started in {time.perf_counter() - started:.1f} s; "
        f"java: {subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.splitlines()[0]}"
    )
    if "commitlog" in args.only:
        bench_commitlog(spark, args)
    if "stream" in args.only or "sink" in args.only:
        bench_stream(spark, args)
    spark.stop()


if __name__ == "__main__":
    main()
