"""Stats: per-topic message counts, bytes and rates over time, from the CommitLog.

    python -m pipeline.jobs.stats STORE_ROOT [STORE_ROOT ...] [--broker-names a,b]
                                  [--window "1 minute"] [--topic T ...] [--out DIR]
                                  [--lite-top N] [--lite-out DIR]

Per topic: records, record bytes, first and last store time, the average rate over that span
and the peak rate of one window. Over time: records and bytes per window (all topics), the
newest ``--rows`` windows shown; ``--out`` writes the whole (topic, window) series as Parquet.
Lite topics (RocketMQ 5.5): per parent topic with lite messages (records with a lite offset,
``liteQueueOffset``), how many lite topics, their records and bytes, and the ``--lite-top``
busiest lite topics; ``--lite-out`` writes every lite topic's figures (topic: its parent,
brokerName, liteTopic, records, bytes, first, last) as Parquet. Both come from the same single
pass over the CommitLog (grouping sets). Counts every record in the log (half and rolled-back
transaction records included, system topics too), so the numbers add up to the CommitLog's
size. Over several roots (one per broker group) a topic's figures add its groups up (a lite
topic found in two groups counts once); a table per broker shows each group's share, and the
``--out`` series has a ``brokerName`` column.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.jobs import cli
from pipeline.jobs.stores import Roots, add_store_arguments, commitlog_frame, roots_from_args

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TopicStats:
    topic: str
    records: int
    bytes: int
    first_ms: int
    last_ms: int
    peak_per_s: float  # the busiest window's records / window length

    @property
    def rate_per_s(self) -> float:
        span_s = (self.last_ms - self.first_ms) / 1000
        return self.records / span_s if span_s > 0 else float(self.records)


@dataclass(frozen=True)
class LiteStats:
    """The lite topics of one parent topic, over all roots."""

    topic: str  # the parent
    lite_topics: int
    records: int
    bytes: int
    top: list[tuple[str, int]]  # (lite topic, records), the busiest first (ties: by name)


@dataclass(frozen=True)
class StatsSummary:
    topics: list[TopicStats]
    windows: list[tuple[str, int, int]]  # (window start, records, bytes), oldest first
    per_broker: list[tuple[str | None, int, int]]  # (brokerName, records, bytes)
    window_s: float
    elapsed_s: float
    lite: list[LiteStats] = field(default_factory=list)  # parents with lite messages, by name


def _window_seconds(spark: SparkSession, window: str) -> float:
    row = spark.sql(
        f"SELECT CAST(INTERVAL {window} AS STRING) AS text, "
        f"unix_micros(TIMESTAMP'1970-01-01 00:00:00 UTC' + INTERVAL {window}) / 1e6 AS s"
    ).first()
    assert row is not None  # a SELECT without FROM has one row
    return float(row["s"])


def run(
    spark: SparkSession,
    store: str | Roots,
    window: str = "1 minute",
    topics: Sequence[str] = (),
    out: str | None = None,
    lite_top: int = 5,
    lite_out: str | None = None,
) -> StatsSummary:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    watch = cli.Stopwatch()
    window_s = _window_seconds(spark, window)
    df = commitlog_frame(
        spark, store, ("topic", "storeTimestamp", "totalSize", "brokerName", "liteTopic", "liteQueueOffset"), topics
    ).select(
        "topic",
        "brokerName",
        F.window("storeTimestamp", window).start.alias("window_start"),
        F.when(F.col("liteQueueOffset").isNotNull(), F.col("liteTopic")).alias("liteTopic"),
        "storeTimestamp",
        "totalSize",
    )
    # One pass: the (topic, broker, window) series and the (topic, broker, lite topic) figures.
    figures = (
        df.groupingSets(
            [["topic", "brokerName", "window_start"], ["topic", "brokerName", "liteTopic"]],
            "topic",
            "brokerName",
            "window_start",
            "liteTopic",
        )
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum("totalSize").alias("bytes"),
            F.min("storeTimestamp").alias("first"),
            F.max("storeTimestamp").alias("last"),
            F.grouping("liteTopic").alias("by_window"),
        )
        .cache()
    )
    series = figures.where(F.col("by_window") == 1).select(
        "topic", "brokerName", "window_start", "records", "bytes", "first", "last"
    )
    per_lite = figures.where((F.col("by_window") == 0) & F.col("liteTopic").isNotNull()).select(
        "topic", "brokerName", "liteTopic", "records", "bytes", "first", "last"
    )
    # A topic's windows over all roots (the peak is the busiest window of the whole topic).
    per_window = series.groupBy("topic", "window_start").agg(
        F.sum("records").alias("records"),
        F.sum("bytes").alias("bytes"),
        F.min("first").alias("first"),
        F.max("last").alias("last"),
    )
    try:
        if out:
            series.write.mode("overwrite").parquet(out)
        if lite_out:
            per_lite.write.mode("overwrite").parquet(lite_out)
        per_topic = (
            per_window.groupBy("topic")
            .agg(
                F.sum("records").alias("records"),
                F.sum("bytes").alias("bytes"),
                F.min("first").alias("first"),
                F.max("last").alias("last"),
                F.max("records").alias("peak"),
            )
            .orderBy("topic")
            .collect()
        )
        over_time = (
            series.groupBy("window_start")
            .agg(F.sum("records").alias("records"), F.sum("bytes").alias("bytes"))
            .orderBy("window_start")
            .collect()
        )
        per_broker = (
            series.groupBy("brokerName")
            .agg(F.sum("records").alias("records"), F.sum("bytes").alias("bytes"))
            .orderBy("brokerName")
            .collect()
        )
        lite_topics = per_lite.groupBy("topic", "liteTopic").agg(
            F.sum("records").alias("records"), F.sum("bytes").alias("bytes")
        )
        per_parent = (
            lite_topics.groupBy("topic")
            .agg(
                F.count(F.lit(1)).alias("lite_topics"),
                F.sum("records").alias("records"),
                F.sum("bytes").alias("bytes"),
            )
            .orderBy("topic")
            .collect()
        )
        busiest = Window.partitionBy("topic").orderBy(F.desc("records"), "liteTopic")
        top = (
            lite_topics.withColumn("rank", F.row_number().over(busiest))
            .where(F.col("rank") <= lite_top)
            .orderBy("topic", "rank")
            .collect()
        )
    finally:
        figures.unpersist()
    to_ms = lambda ts: int(ts.timestamp() * 1000)  # noqa: E731
    return StatsSummary(
        topics=[
            TopicStats(
                r["topic"],
                int(r["records"]),
                int(r["bytes"]),
                to_ms(r["first"]),
                to_ms(r["last"]),
                r["peak"] / window_s,
            )
            for r in per_topic
        ],
        windows=[
            (r["window_start"].strftime("%Y-%m-%d %H:%M:%S"), int(r["records"]), int(r["bytes"])) for r in over_time
        ],
        per_broker=[(r["brokerName"], int(r["records"]), int(r["bytes"])) for r in per_broker],
        window_s=window_s,
        elapsed_s=watch.elapsed_s,
        lite=[
            LiteStats(
                r["topic"],
                int(r["lite_topics"]),
                int(r["records"]),
                int(r["bytes"]),
                [(t["liteTopic"], int(t["records"])) for t in top if t["topic"] == r["topic"]],
            )
            for r in per_parent
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.jobs.stats", description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, "store root (with commitlog/) or its commitlog/ directory")
    parser.add_argument("--window", default="1 minute", help='time bucket, a Spark interval ("10 seconds", "1 hour")')
    parser.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    parser.add_argument("--out", help="write the (topic, window) series here as Parquet")
    parser.add_argument("--rows", type=int, default=20, help="newest windows to show (default 20)")
    parser.add_argument("--lite-top", type=int, default=5, help="busiest lite topics shown per parent (default 5)")
    parser.add_argument("--lite-out", help="write every lite topic's figures here as Parquet")
    cli.add_spark_arguments(parser)
    args = parser.parse_args(argv)
    roots = roots_from_args(parser, args)
    spark = cli.session(args, "stats")
    with cli.progress(spark, "stats", not args.no_progress):
        summary = run(spark, roots, args.window, tuple(args.topic), args.out, args.lite_top, args.lite_out)
    stamp = lambda ms: datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
    cli.console.print(
        cli.table(
            "Per topic",
            ("topic", "records", "bytes", "first", "last", "avg/s", "peak/s"),
            [
                (t.topic, t.records, t.bytes, stamp(t.first_ms), stamp(t.last_ms), t.rate_per_s, t.peak_per_s)
                for t in summary.topics
            ],
        )
    )
    if summary.lite:
        cli.console.print(
            cli.table(
                "Lite topics per parent",
                ("parent topic", "lite topics", "records", "bytes", f"busiest {args.lite_top} (records)"),
                [
                    (t.topic, t.lite_topics, t.records, t.bytes, ", ".join(f"{name} ({n:,})" for name, n in t.top))
                    for t in summary.lite
                ],
            )
        )
    if len(roots) > 1:
        cli.console.print(cli.table("Per broker", ("broker", "records", "bytes"), summary.per_broker))
    shown = summary.windows[-args.rows :]
    cli.console.print(
        cli.table(
            f"Over time ({args.window} windows, newest {len(shown)} of {len(summary.windows)})",
            ("window start (UTC)", "records", "bytes", "records/s"),
            [(w, n, b, n / summary.window_s) for w, n, b in shown],
        )
    )
    total = sum(t.records for t in summary.topics)
    cli.console.print(f"{total:,} records, {len(summary.topics)} topics, in {summary.elapsed_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run_job(main))
