"""Export: CommitLog -> Parquet, partitioned by topic.

    python -m pipeline.jobs.export STORE_ROOT [STORE_ROOT ...] OUT_DIR [--broker-names a,b]
                                   [--topic T ...] [--since T] [--until T]
                                   [--mode error|overwrite|append] [--all-records]

Reads the ``rocketmq-commitlog`` source (every column but ``segment`` and ``crcValid``), keeps
the records of the given topics stored in ``[since, until)`` (epoch ms or ISO-8601), and writes
``OUT_DIR/topic=<name>/part-*.parquet``. By default only records a consumer can see are
exported (not transactional, or committed: what the store dispatches to ConsumeQueues);
``--all-records`` keeps half (prepared) and rolled-back ones too. Several roots (one per broker
group, ``--broker-names``) go into one output, each row naming its ``brokerName``. A lite
message (RocketMQ 5.5) is exported once, under its parent topic, with its ``liteTopic`` and
``liteQueueOffset`` (its offset in the lite topic), so a lite topic is
``WHERE topic = parent AND liteTopic = name ORDER BY liteQueueOffset``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.jobs import cli
from pipeline.jobs.stores import Roots, add_store_arguments, commitlog_frame, dispatchable, roots_from_args

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

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
    "brokerName",
    "liteTopic",
    "liteQueueOffset",
)


@dataclass(frozen=True)
class ExportSummary:
    out: str
    per_topic: list[tuple[str, int, int]]  # (topic, records, record bytes), all roots
    per_broker: list[tuple[str | None, int, int]]  # (brokerName, records, record bytes)
    elapsed_s: float

    @property
    def records(self) -> int:
        return sum(r for _, r, _ in self.per_topic)


def run(
    spark: SparkSession,
    store: str | Roots,
    out: str,
    topics: Sequence[str] = (),
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
        .groupBy("topic", "brokerName")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("totalSize").alias("bytes"))
        .collect()
    )
    return ExportSummary(out, _totals(counted, "topic"), _totals(counted, "brokerName"), watch.elapsed_s)


def _totals(rows: list[Row], key: str) -> list[tuple[Any, int, int]]:
    """(``row[key]``, records, bytes) per value of ``key`` (a topic, or a brokerName: None first)."""
    totals: dict[Any, tuple[int, int]] = {}
    for row in rows:
        n, size = totals.get(row[key], (0, 0))
        totals[row[key]] = (n + row["n"], size + (row["bytes"] or 0))
    return [(k, n, size) for k, (n, size) in sorted(totals.items(), key=lambda kv: (kv[0] is not None, kv[0] or ""))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.jobs.export", description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, "store root (with commitlog/) or its commitlog/ directory")
    parser.add_argument("out", help="output directory (Parquet, partitioned by topic)")
    parser.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    parser.add_argument("--since", type=cli.parse_time_ms, help="store time >= (epoch ms or ISO-8601)")
    parser.add_argument("--until", type=cli.parse_time_ms, help="store time < (epoch ms or ISO-8601)")
    parser.add_argument("--mode", choices=("error", "overwrite", "append"), default="error")
    parser.add_argument("--all-records", action="store_true", help="also half and rolled-back transaction records")
    cli.add_spark_arguments(parser)
    args = parser.parse_args(argv)
    roots = roots_from_args(parser, args)
    spark = cli.session(args, "export")
    with cli.progress(spark, "export", not args.no_progress):
        summary = run(spark, roots, args.out, tuple(args.topic), args.since, args.until, args.mode, args.all_records)
    cli.console.print(cli.table(f"Exported to {summary.out}", ("topic", "records", "bytes"), summary.per_topic))
    if len(roots) > 1:
        cli.console.print(cli.table("Per broker", ("broker", "records", "bytes"), summary.per_broker))
    rate = summary.records / summary.elapsed_s if summary.elapsed_s else 0.0
    cli.console.print(f"{summary.records:,} records in {summary.elapsed_s:.1f} s ({rate:,.0f} records/s)")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run_job(main))
