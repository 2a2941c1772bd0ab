"""Audit: do the ConsumeQueues agree with the CommitLog, and do the CRCs hold?

    python -m pipeline.jobs.audit STORE_ROOT [STORE_ROOT ...] [--broker-names a,b] [--examples 10]

Checks (exit code 1 when any fails, with examples):

1. **CRC**: every record's body CRC and, when present, its whole-record CRC trailer
   (``verifyCrc``).
2. **Units point at records**: every ConsumeQueue unit's commitLogOffset is where a record
   starts, and that record has the unit's size, topic, queue id and queue offset, and the
   tags code the store would write.
3. **Dispatched exactly once**: every record the store dispatches (not transactional, or
   committed) of a topic that has ConsumeQueues has exactly one unit.
4. **Lite offsets** (lite topics, RocketMQ 5.5): the store numbers each lite topic's messages
   itself under its put lock (INNER_MULTI_QUEUE_OFFSET, ``liteQueueOffset``), and its lite
   index is rebuilt from those numbers, so in CommitLog order each lite topic's offsets must
   run 0, 1, 2, ... with no duplicate and no gap. A failure names the lite topic as the queue
   the store reads it as, ``%LMQ%$<parent>$<lite topic>`` queue 0. Two exceptions the store
   makes itself: a lite topic may start again at 0 after it expired (idle at least
   ``LITE_EXPIRATION_FLOOR_MS``, 15 minutes, since its previous message: a restart sooner is a
   failure), and its first offset is not checked once retention has removed the CommitLog's
   first segment. The lite index itself (``<root>/lite``, LMDB) is not read: it is a cache of
   these numbers, rebuilt by the store when it is missing (``rebuild`` removes it).

Run it on a stopped store (or a copy): a running store appends records before it dispatches
them. Units below the CommitLog's first segment (retention) are not checked. Several roots (one
per broker group) are audited in one run, each against itself: a unit points into its own
root's CommitLog (and each group numbers its own lite topics); every failure names its
``brokerName``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.jobs import cli
from pipeline.jobs.stores import (
    Roots,
    add_store_arguments,
    commitlog_frame,
    consumequeue_frame,
    dispatchable,
    roots_from_args,
    same_broker,
)
from services.domain.lite import LITE_SEPARATOR, LITE_TOPIC_PREFIX, LMQ_QUEUE_ID, split_lmq_name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

RECORD_COLUMNS = (
    "commitLogOffset",
    "totalSize",
    "queueId",
    "queueOffset",
    "sysFlag",
    "topic",
    "brokerName",
    "crcValid",
    "tagsCode",
    "storeTimestamp",
    "liteTopic",
    "liteQueueOffset",
)
# A lite topic starts again at 0 only after it expired: idle at least this long
# (services/store/lite/lifecycle.py, LITE_EXPIRATION_FLOOR_MS; the test pairs them).
LITE_RESTART_IDLE_MS_MIN = 15 * 60_000


@dataclass(frozen=True)
class AuditSummary:
    records: int
    units: int
    crc_failures: list[tuple[str | None, int]]  # (brokerName, phy offset)
    # (brokerName, topic, queue, queue offset, phy offset, why)
    unit_mismatches: list[tuple[str | None, str, int, int, int, str]]
    # (brokerName, phy offset, topic, queue, queue offset, units)
    dispatch_mismatches: list[tuple[str | None, int, str, int, int, int]]
    counts: dict[str, int] = field(default_factory=dict)  # check -> failures (all, not just examples)
    elapsed_s: float = 0.0
    lite_records: int = 0  # records with a lite offset (liteQueueOffset)
    lite_topics: int = 0  # distinct (brokerName, parent, lite topic)
    # (brokerName, %LMQ%$parent$lite, lite offset, phy offset, why)
    lite_mismatches: list[tuple[str | None, str, int, int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())


def run(spark: SparkSession, store: str | Roots, examples: int = 10) -> AuditSummary:
    """Three Spark actions: one over the records, one over the units, one that finds every
    failure (counted per check, the first ``examples`` of each by offset kept)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    watch = cli.Stopwatch()
    records = commitlog_frame(spark, store, RECORD_COLUMNS, verifyCrc="true", failOnCrcError="false").cache()
    units = (
        consumequeue_frame(spark, store)
        .select("topic", "brokerName", "queueId", "queueOffset", "commitLogOffset", "size", "tagsCode")
        .cache()
    )
    try:
        per_root = (
            records.groupBy("brokerName").agg(
                F.min("commitLogOffset").alias("minPhy"),
                F.count(F.lit(1)).alias("n"),
                F.count("liteQueueOffset").alias("lite"),
                F.countDistinct(F.when(F.col("liteQueueOffset").isNotNull(), F.col("topic")), "liteTopic").alias(
                    "liteTopics"
                ),
            )
        ).collect()
        first_phy = {row["brokerName"]: row["minPhy"] for row in per_root}
        total_records = sum(row["n"] for row in per_root)
        total_units = units.count()

        def failure(
            df: DataFrame,
            check: str,
            broker: Column,
            topic: Column,
            queue: Column,
            queue_offset: Column,
            phy: Column,
            detail: Column,
        ) -> DataFrame:
            return df.select(
                F.lit(check).alias("check"),
                broker.alias("brokerName"),
                topic.alias("topic"),
                queue.alias("queueId"),
                queue_offset.alias("queueOffset"),
                phy.alias("commitLogOffset"),
                detail.cast("string").alias("detail"),
            )

        crc = records.where(~F.col("crcValid"))
        crc = failure(
            crc,
            "crc",
            F.col("brokerName"),
            F.col("topic"),
            F.col("queueId"),
            F.col("queueOffset"),
            F.col("commitLogOffset"),
            F.lit("crc mismatch"),
        )
        r = records.alias("r")
        # Units below their root's first record were left by retention: not checked.
        floor = F.lit(None).cast("bigint")
        for broker, phy in first_phy.items():
            floor = F.when(F.col("brokerName").eqNullSafe(F.lit(broker).cast("string")), F.lit(phy)).otherwise(floor)
        u = units.where(F.col("commitLogOffset") >= F.coalesce(floor, F.lit(0))).alias("u")
        why = (
            F.when(F.col("r.commitLogOffset").isNull(), F.lit("no record starts there"))
            .when(
                F.col("u.size") != F.col("r.totalSize"),
                F.concat(
                    F.lit("size "),
                    F.col("u.size").cast("string"),
                    F.lit(" != record "),
                    F.col("r.totalSize").cast("string"),
                ),
            )
            .when(F.col("u.topic") != F.col("r.topic"), F.concat(F.lit("record topic "), F.col("r.topic")))
            .when(
                F.col("u.queueId") != F.col("r.queueId"),
                F.concat(F.lit("record queue "), F.col("r.queueId").cast("string")),
            )
            .when(
                F.col("u.queueOffset") != F.col("r.queueOffset"),
                F.concat(F.lit("record queue offset "), F.col("r.queueOffset").cast("string")),
            )
            .when(
                F.col("u.tagsCode") != F.col("r.tagsCode"),
                F.concat(F.lit("tags code != record's "), F.col("r.tagsCode").cast("string")),
            )
        )
        bad_units = (
            u.join(r, same_broker("u", "r") & (F.col("u.commitLogOffset") == F.col("r.commitLogOffset")), "left")
            .withColumn("why", why)
            .where(F.col("why").isNotNull())
        )
        bad_units = failure(
            bad_units,
            "units",
            F.col("u.brokerName"),
            F.col("u.topic"),
            F.col("u.queueId"),
            F.col("u.queueOffset"),
            F.col("u.commitLogOffset"),
            F.col("why"),
        )
        has_queues = units.select("brokerName", "topic").distinct().alias("t")
        expected = (
            dispatchable(records)
            .alias("d")
            .join(has_queues, same_broker("d", "t") & (F.col("d.topic") == F.col("t.topic")), "left_semi")
            .alias("e")
        )
        per_record = units.groupBy("brokerName", "commitLogOffset").agg(F.count(F.lit(1)).alias("n")).alias("c")
        dispatch = (
            expected.join(
                per_record, same_broker("e", "c") & (F.col("e.commitLogOffset") == F.col("c.commitLogOffset")), "left"
            )
            .withColumn("n", F.coalesce(F.col("c.n"), F.lit(0)))
            .where(F.col("n") != 1)
        )
        dispatch = failure(
            dispatch,
            "dispatch",
            F.col("e.brokerName"),
            F.col("e.topic"),
            F.col("e.queueId"),
            F.col("e.queueOffset"),
            F.col("e.commitLogOffset"),
            F.col("n"),
        )
        lite = _lite_failures(records, first_phy)
        lite = failure(
            lite,
            "lite",
            F.col("brokerName"),
            F.col("lmq"),
            F.lit(LMQ_QUEUE_ID),
            F.col("liteQueueOffset"),
            F.col("commitLogOffset"),
            F.col("why"),
        )
        ranked = Window.partitionBy("check").orderBy("brokerName", "commitLogOffset", "topic", "queueId", "queueOffset")
        found = (
            crc.unionByName(bad_units)
            .unionByName(dispatch)
            .unionByName(lite)
            .withColumn("failures", F.count(F.lit(1)).over(Window.partitionBy("check")))
            .withColumn("rank", F.row_number().over(ranked))
            .where(F.col("rank") <= examples)
            .collect()
        )
    finally:
        records.unpersist()
        units.unpersist()
    counts = {"crc": 0, "units": 0, "dispatch": 0, "lite": 0}
    for row in found:
        counts[row["check"]] = row["failures"]
    of = lambda check: [row for row in found if row["check"] == check]  # noqa: E731
    return AuditSummary(
        total_records,
        total_units,
        [(row["brokerName"], row["commitLogOffset"]) for row in of("crc")],
        [
            (row["brokerName"], row["topic"], row["queueId"], row["queueOffset"], row["commitLogOffset"], row["detail"])
            for row in of("units")
        ],
        [
            (
                row["brokerName"],
                row["commitLogOffset"],
                row["topic"],
                row["queueId"],
                row["queueOffset"],
                int(row["detail"]),
            )
            for row in of("dispatch")
        ],
        counts,
        watch.elapsed_s,
        lite_records=sum(row["lite"] for row in per_root),
        lite_topics=sum(row["liteTopics"] for row in per_root),
        lite_mismatches=[
            (row["brokerName"], row["topic"], row["queueOffset"], row["commitLogOffset"], row["detail"])
            for row in of("lite")
        ],
    )


def _lite_failures(records: DataFrame, first_phy: dict[str | None, int]) -> DataFrame:
    """Records whose lite offset does not follow their lite topic's previous one (in CommitLog
    order, per root): columns brokerName, lmq, liteQueueOffset, commitLogOffset, why."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    trimmed = F.lit(False)  # roots whose CommitLog no longer starts at 0 (retention)
    for broker, phy in first_phy.items():
        if phy:
            trimmed = trimmed | F.col("brokerName").eqNullSafe(F.lit(broker).cast("string"))
    order = Window.partitionBy("brokerName", "topic", "liteTopic").orderBy("commitLogOffset")
    offset, previous = F.col("liteQueueOffset"), F.lag("liteQueueOffset").over(order)
    idle_ms = F.unix_millis("storeTimestamp") - F.unix_millis(F.lag("storeTimestamp").over(order))
    text = lambda column: column.cast("string")  # noqa: E731
    why = (
        F.when(
            previous.isNull(),
            F.when(
                (offset != 0) & ~trimmed,
                F.concat(F.lit("first offset "), text(offset), F.lit(", not 0")),
            ),
        )
        .when(offset == previous + 1, F.lit(None))
        .when(
            offset == 0,
            F.when(
                idle_ms < LITE_RESTART_IDLE_MS_MIN,
                F.concat(
                    F.lit("restart at 0 after "),
                    text(previous),
                    F.lit(" only "),
                    text(idle_ms),
                    F.lit(" ms later (< 15 min idle)"),
                ),
            ),
        )
        .when(offset <= previous, F.concat(F.lit("duplicate: "), text(offset), F.lit(" after "), text(previous)))
        .otherwise(F.concat(F.lit("gap: "), text(offset), F.lit(" after "), text(previous)))
    )
    lmq = F.concat(F.lit(LITE_TOPIC_PREFIX), F.col("topic"), F.lit(LITE_SEPARATOR), F.col("liteTopic"))
    return (
        records.where(F.col("liteQueueOffset").isNotNull() & F.col("liteTopic").isNotNull())
        .select("brokerName", "topic", "liteTopic", "liteQueueOffset", "commitLogOffset", "storeTimestamp")
        .withColumn("why", why)
        .where(F.col("why").isNotNull())
        .withColumn("lmq", lmq)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.jobs.audit", description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, "store root (with commitlog/ and consumequeue/)")
    parser.add_argument("--examples", type=int, default=10, help="failures shown per check (default 10)")
    cli.add_spark_arguments(parser)
    args = parser.parse_args(argv)
    roots = roots_from_args(parser, args)
    spark = cli.session(args, "audit")
    with cli.progress(spark, "audit", not args.no_progress):
        s = run(spark, roots, args.examples)
    verdict = lambda n: "[green]ok[/green]" if n == 0 else f"[red]{n:,} failed[/red]"  # noqa: E731
    cli.console.print(
        cli.table(
            "Audit",
            ("check", "checked", "result"),
            [
                ("record CRCs", s.records, verdict(s.counts["crc"])),
                ("units point at matching records", s.units, verdict(s.counts["units"])),
                ("dispatchable records have exactly one unit", s.records, verdict(s.counts["dispatch"])),
                (
                    f"lite offsets dense 0..n-1 ({s.lite_topics:,} lite topics)",
                    s.lite_records,
                    verdict(s.counts["lite"]),
                ),
            ],
        )
    )
    if s.crc_failures:
        cli.console.print(
            "CRC failures at phy offsets: "
            + ", ".join(f"{phy}" if broker is None else f"{broker}:{phy}" for broker, phy in s.crc_failures)
        )
    if s.unit_mismatches:
        cli.console.print(
            cli.table(
                "Units that do not match their record",
                ("broker", "topic", "queue", "queue offset", "phy offset", "why"),
                s.unit_mismatches,
            )
        )
    if s.dispatch_mismatches:
        cli.console.print(
            cli.table(
                "Records without exactly one unit",
                ("broker", "phy offset", "topic", "queue", "queue offset", "units"),
                s.dispatch_mismatches,
            )
        )
    if s.lite_mismatches:
        cli.console.print(
            cli.table(
                "Lite offsets out of sequence",
                ("broker", "parent", "lite topic", "lite offset", "phy offset", "why"),
                [(broker, *(split_lmq_name(lmq) or (lmq, "")), *rest) for broker, lmq, *rest in s.lite_mismatches],
            )
        )
    cli.console.print(
        f"{'OK' if s.ok else 'INCONSISTENT'}: {s.records:,} records, {s.units:,} units, {s.elapsed_s:.1f} s"
    )
    return 0 if s.ok else 1


if __name__ == "__main__":
    sys.exit(cli.run_job(main))
