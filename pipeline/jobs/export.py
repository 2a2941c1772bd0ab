"""Export: CommitLog -> Parquet, partitioned by topic.

    python -m pipeline.jobs.export STORE_ROOT OUT_DIR [--topic T ...] [--since T] [--until T]
                                   [--mode error|overwrite|append] [--all-records]

Reads the ``rocketmq-commitlog`` source (every column but ``segment`` and ``crcValid``), keeps
the records of the given topics stored in ``[since, until)`` (epoch ms or ISO-8601), and writes
``OUT_DIR/topic=<name>/part-*.parquet``. By default only records a consumer can see are
exported (not transactional, or committed: what the store dispatches to ConsumeQueues);
``--all-records`` keeps half (prepared) and rolled-back ones too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from pipeline.jobs import cli

EXPORT_COLUMNS = (
    "commitLogOffset",
    "totalSize",
    "queueId",
    "flag",
    "queueOffset",
    "sysFlag",
    "bornTimestamp",
    "bornHost",
    "storeTimestamp",
    "storeHost",
    "reconsumeTimes",
    "preparedTransactionOffset",
    "topic",
    "body",
    "properties",
    "tags",
    "keys",
    "uniqKey",
)


@dataclass(frozen=True)
class ExportSummary:
    out: str
    per_topic: list[tuple[str, int, int]]  # (topic, records, record bytes)
    elapsed_s: float

    @property
    def records(self) -> int:
        return sum(r for _, r, _ in self.per_topic)


def dispatchable(df):
    """Records the store dispatches: SYSFLAG transaction type NOT (0) or COMMIT (8)."""
    from pyspark.sql import functions as F

    kind = F.col("sysFlag").bitwiseAND(0xC)
    return df.where((kind == 0) | (kind == 8))


def commitlog_frame(
    spark, store: str, columns, topics=(), since_ms: int | None = None, until_ms: int | None = None, **options
):
    """The commitlog source with ``columns`` selected (decoded only those) and the filters."""
    from pyspark.sql import functions as F

    from pipeline.schema import COMMITLOG_COLUMNS, ddl

    kinds = dict(COMMITLOG_COLUMNS)
    wanted = set(columns) | ({"topic"} if topics else set()) | ({"storeTimestamp"} if since_ms or until_ms else set())
    schema = ddl([(name, kinds[name]) for name, _ in COMMITLOG_COLUMNS if name in wanted])
    reader = spark.read.format("rocketmq-commitlog").schema(schema)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    df = reader.load(store)
    if topics:
        df = df.where(F.col("topic").isin(list(topics)))
    if since_ms is not None:
        df = df.where(F.col("storeTimestamp") >= F.timestamp_millis(F.lit(since_ms)))
    if until_ms is not None:
        df = df.where(F.col("storeTimestamp") < F.timestamp_millis(F.lit(until_ms)))
    return df.select(*columns)


def run(
    spark,
    store: str,
    out: str,
    topics=(),
    since_ms: int | None = None,
    until_ms: int | None = None,
    mode: str = "error",
    all_records: bool = False,
) -> ExportSummary:
    from pyspark.sql import functions as F

    watch = cli.Stopwatch()
    df = commitlog_frame(spark, store, EXPORT_COLUMNS, topics, since_ms, until_ms)
    if not all_records:
        df = dispatchable(df)
    df.write.mode(mode).partitionBy("topic").parquet(out)
    counted = (
        spark.read.parquet(out)
        .groupBy("topic")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("totalSize").alias("bytes"))
        .orderBy("topic")
        .collect()
    )
    return ExportSummary(out, [(r["topic"], r["n"], r["bytes"] or 0) for r in counted], watch.elapsed_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.jobs.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("store", help="store root (with commitlog/) or its commitlog/ directory")
    parser.add_argument("out", help="output directory (Parquet, partitioned by topic)")
    parser.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    parser.add_argument("--since", type=cli.parse_time_ms, help="store time >= (epoch ms or ISO-8601)")
    parser.add_argument("--until", type=cli.parse_time_ms, help="store time < (epoch ms or ISO-8601)")
    parser.add_argument("--mode", choices=("error", "overwrite", "append"), default="error")
    parser.add_argument("--all-records", action="store_true", help="also half and rolled-back transaction records")
    cli.add_spark_arguments(parser)
    args = parser.parse_args(argv)
    spark = cli.session(args, "export")
    with cli.progress(spark, "export", not args.no_progress):
        summary = run(
            spark, args.store, args.out, tuple(args.topic), args.since, args.until, args.mode, args.all_records
        )
    cli.console.print(cli.table(f"Exported to {summary.out}", ("topic", "records", "bytes"), summary.per_topic))
    rate = summary.records / summary.elapsed_s if summary.elapsed_s else 0.0
    cli.console.print(f"{summary.records:,} records in {summary.elapsed_s:.1f} s ({rate:,.0f} records/s)")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run_job(main))
