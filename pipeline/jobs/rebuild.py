"""Rebuild: ConsumeQueues and IndexFiles from the CommitLog, byte-identical to the store's.

    python -m pipeline.jobs.rebuild STORE_ROOT [STORE_ROOT ...] [--broker-names a,b]
        [--output DIR] [--no-index] [--force]
        [--consume-queue-units-per-file N] [--index-hash-slot-num N] [--index-num-max N]
        [--delay-levels "1s 5s ..."]

Writes ``consumequeue/`` and ``index/`` under ``--output`` (default: the store root itself,
which must not have them unless ``--force``, which deletes them first). The store must be
stopped. Several roots (one per broker group, named with ``--broker-names``) are rebuilt in
one run, each from its own CommitLog into itself, or into ``--output``/<brokerName>. The sizes must be the store's (StoreConfig: 300,000 units per ConsumeQueue file,
5,000,000 hash slots and 20,000,000 entries per IndexFile by default; pyrmq's tests use small
ones).

How the bytes are guaranteed: the records are decoded by the ``rocketmq-commitlog`` source
(``tagsCode`` computed as the store does), and the files are written by the store's own
writers, fed the same ``DispatchRequest``s in the same order as its reput thread does:

* ConsumeQueues: grouped by (topic, queueId) in Spark, each group sorted by commitLogOffset
  and written by ``services.store.log.consume_queue.ConsumeQueue.put_requests`` on an executor
  (queues are independent, so this runs in parallel; the output path must be visible to every
  executor, like the input).
* IndexFiles: chain order is CommitLog order across all topics, so each root's records with
  keys are sorted into one partition and ``services.store.index.service.IndexService.build_index_batch``
  writes them in one task (a task per root). File *names* are the local time at which the store created them;
  a rebuild names each file from the store time of the record that opened it, so names can
  differ from the originals by the store's dispatch delay (milliseconds); contents are
  identical, and names only order the files.

The lite index (lite topics' queues, RocketMQ 5.5: ``<root>/lite``, StoreConfig.lite_index_dir,
one LMDB file; services/store/lite/index.py) is not written here: the store rebuilds it from
the CommitLog by itself (every lite record's INNER_MULTI_QUEUE_OFFSET) when it starts without
one. So a rebuild into the store root removes that directory, rather than leave an index that
may not match the CommitLog any more, and the store's next start rebuilds it (9.91 s for a
million lite topics, bench/RESULTS.md). With ``--output`` the roots are left alone: install
the rebuilt files in a root whose ``lite/`` is removed likewise. What the store's rebuild
cannot restore: lite topics that had expired come back (until the next expiry sweep), and one
that expired and was sent to again (numbered from 0 a second time) gets both runs mixed, the
old run's later messages after the new ones (the audit reports a gap at its next message).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.jobs import cli
from pipeline.jobs.stores import (
    CommitLogOptions,
    Roots,
    add_store_arguments,
    as_roots,
    commitlog_frame,
    dispatchable,
    roots_from_args,
)
from services.domain.format.properties_format import KEYS, UNIQ_KEY

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from services.store.index.service import IndexService
    from services.store.model import DispatchRequest

CQ_COLUMNS = (
    "commitLogOffset",
    "totalSize",
    "queueId",
    "queueOffset",
    "sysFlag",
    "storeTimestamp",
    "topic",
    "brokerName",
    "tagsCode",
)
INDEX_COLUMNS = ("commitLogOffset", "sysFlag", "storeTimestamp", "topic", "properties", "brokerName")
DISPATCH_BATCH_MAX = 4096  # the store's reput batch (reput.DISPATCH_BATCH_MAX)


@dataclass(frozen=True)
class RebuildSummary:
    queues: int
    units: int
    consume_queue_files: int
    index_files: int
    index_keys: int
    elapsed_s: float
    lite_index_removed: tuple[str, ...] = ()  # the roots' lite index directories removed


class ReplayClock:
    """The store clock IndexService names files by: the store time of the current record."""

    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now

    def monotonic_s(self) -> float:
        return self.now / 1000


def _requests(table: pa.Table) -> list[DispatchRequest]:
    """DispatchRequests of an Arrow table sorted by commitLogOffset."""
    from services.store.model import DispatchRequest

    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    store_ms = [int(ts.timestamp() * 1000) if ts is not None else 0 for ts in columns["storeTimestamp"]]
    count = table.num_rows
    get = lambda name: columns.get(name, [None] * count)  # noqa: E731
    props = get("properties")
    return [
        DispatchRequest(
            t,
            q,
            phy,
            size,
            code,
            ms,
            qo,
            (dict(p).get(KEYS, "") if p else ""),
            (dict(p).get(UNIQ_KEY, "") if p else ""),
            flag,
            0,
        )
        for t, q, phy, size, code, ms, qo, p, flag in zip(
            get("topic"),
            get("queueId"),
            get("commitLogOffset"),
            get("totalSize"),
            get("tagsCode"),
            store_ms,
            get("queueOffset"),
            props,
            get("sysFlag"),
        )
    ]


def _write_queue_fn(
    cq_dirs: dict[str | None, str], units_per_file: int
) -> Callable[[tuple[pa.Scalar, ...], pa.Table], pa.Table]:
    # applyInArrow reads these hints: (keys, table) -> table is the grouped-map form it also
    # takes without hints (an Iterator of batches would make it another kind of function).
    def write_queue(key: tuple[pa.Scalar, ...], table: pa.Table) -> pa.Table:
        import pyarrow as pa

        from services.store.log.consume_queue import ConsumeQueue

        broker, topic, queue_id = key[0].as_py(), key[1].as_py(), key[2].as_py()
        table = table.sort_by("commitLogOffset")
        cq = ConsumeQueue(topic, queue_id, Path(cq_dirs[broker]), units_per_file)
        try:
            requests = _requests(table)
            for start in range(0, len(requests), DISPATCH_BATCH_MAX):
                cq.put_requests(requests[start : start + DISPATCH_BATCH_MAX])
            cq.flush()
            files = len(cq.mfq.files)
        finally:
            cq.close()
        return pa.table(
            {
                "brokerName": pa.array([broker], pa.string()),
                "topic": pa.array([topic], pa.string()),
                "queueId": pa.array([queue_id], pa.int32()),
                "units": pa.array([table.num_rows], pa.int64()),
                "files": pa.array([files], pa.int32()),
            }
        )

    return write_queue


def _runs(batch: pa.RecordBatch, column: str) -> Iterator[tuple[Any, pa.RecordBatch]]:
    """(value, slice) of each run of equal ``column`` values in a batch."""
    values = batch.column(column).to_pylist()
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            yield values[start], batch.slice(start, i - start)
            start = i


def _write_index_fn(
    index_dirs: dict[str | None, str], hash_slot_num: int, index_num_max: int
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Writes the IndexFiles of every root whose records reach this task, sorted by
    (brokerName, commitLogOffset): one IndexService per root, in CommitLog order."""

    def write_index(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from services.store.index.service import IndexService

        done: list[tuple[str | None, int, int]] = []
        service: IndexService | None = None
        current: str | None = None  # the brokerName of the root ``service`` writes
        clock, keys = ReplayClock(), 0

        def close() -> None:
            if service is not None:
                done.append((current, len(service.files), keys))
                service.close()

        try:
            for batch in batches:
                for broker, part in _runs(batch, "brokerName"):
                    if service is None or broker != current:
                        close()
                        clock = ReplayClock()
                        service = IndexService(Path(index_dirs[broker]), hash_slot_num, index_num_max, clock)
                        current, keys = broker, 0
                    requests = _requests(pa.Table.from_batches([part]))
                    for start in range(0, len(requests), DISPATCH_BATCH_MAX):
                        chunk = requests[start : start + DISPATCH_BATCH_MAX]
                        clock.now = chunk[0].store_timestamp_ms
                        service.build_index_batch(chunk)
                        keys += sum(bool(r.uniq_key) + len([k for k in r.keys.split(" ") if k]) for r in chunk)
        finally:
            close()
        yield pa.RecordBatch.from_pydict(
            {
                "brokerName": pa.array([b for b, _, _ in done], pa.string()),
                "files": pa.array([f for _, f, _ in done], pa.int32()),
                "keys": pa.array([k for _, _, k in done], pa.int64()),
            }
        )

    return write_index


def targets(roots: Roots, output: str | None) -> dict[str | None, Path]:
    """Where each root's consumequeue/ and index/ go: the root itself, or ``output`` (one root)
    or ``output/<brokerName>`` (several)."""
    if output is None:
        return {name: Path(root) for name, root in roots}
    if len(roots) == 1:
        return {roots[0][0]: Path(output)}
    return {name: Path(output) / str(name) for name, _ in roots}


def run(
    spark: SparkSession,
    store: str | Roots,
    output: str | None = None,
    index: bool = True,
    force: bool = False,
    units_per_file: int | None = None,
    hash_slot_num: int | None = None,
    index_num_max: int | None = None,
    delay_levels: str | None = None,
) -> RebuildSummary:
    from pyspark.sql import functions as F

    from services.store.config import StoreConfig

    roots = as_roots(store)
    defaults = StoreConfig(store_root=Path(roots[0][1]))
    units_per_file = units_per_file or defaults.consume_queue_units_per_file
    hash_slot_num = hash_slot_num or defaults.index_hash_slot_num
    index_num_max = index_num_max or defaults.index_num_max
    watch = cli.Stopwatch()
    places = targets(roots, output)
    cq_dirs = {name: str(place / "consumequeue") for name, place in places.items()}
    index_dirs = {name: str(place / "index") for name, place in places.items()}
    directories = [Path(d) for d in cq_dirs.values()] + ([Path(d) for d in index_dirs.values()] if index else [])
    busy = [d for d in directories if d.exists() and any(d.iterdir())]
    if busy and not force:
        raise FileExistsError(f"{', '.join(map(str, busy))} not empty; move it away or pass --force to delete it")
    for directory in busy:
        shutil.rmtree(directory)
    # In place: the store's lite index goes too (rebuilt by the store from the CommitLog at start).
    lite_dirs = [StoreConfig(store_root=Path(root)).lite_index_dir for _, root in roots] if output is None else []
    lite_removed = tuple(str(d) for d in lite_dirs if d.exists())
    for directory in lite_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    options: CommitLogOptions = {"delayLevels": delay_levels} if delay_levels else {}

    records = dispatchable(commitlog_frame(spark, roots, CQ_COLUMNS, **options))
    written = (
        records.groupBy("brokerName", "topic", "queueId")
        .applyInArrow(
            _write_queue_fn(cq_dirs, units_per_file),
            "brokerName string, topic string, queueId int, units bigint, files int",
        )
        .collect()
    )
    index_files = index_keys = 0
    if index:
        from pyspark.sql.functions import col

        rollback = 0xC
        keyed = (
            commitlog_frame(spark, roots, INDEX_COLUMNS, **options)
            .where(col("sysFlag").bitwiseAND(0xC) != rollback)
            .where(F.col("properties").getItem(UNIQ_KEY).isNotNull() | F.col("properties").getItem(KEYS).isNotNull())
            .withColumn("properties", F.map_filter("properties", lambda k, v: k.isin(KEYS, UNIQ_KEY)))
        )
        built = (
            keyed.repartition(len(roots), "brokerName")
            .sortWithinPartitions("brokerName", "commitLogOffset")
            .mapInArrow(
                _write_index_fn(index_dirs, hash_slot_num, index_num_max),
                "brokerName string, files int, keys bigint",
            )
            .collect()
        )
        index_files, index_keys = sum(r["files"] for r in built), sum(r["keys"] for r in built)
    return RebuildSummary(
        queues=len(written),
        units=sum(r["units"] for r in written),
        consume_queue_files=sum(r["files"] for r in written),
        index_files=index_files,
        index_keys=index_keys,
        elapsed_s=watch.elapsed_s,
        lite_index_removed=lite_removed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.jobs.rebuild", description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, "store root (with commitlog/); the store must be stopped")
    parser.add_argument(
        "--output", help="write consumequeue/ and index/ here (several roots: under <brokerName>/; default: each root)"
    )
    parser.add_argument("--no-index", action="store_true", help="rebuild the ConsumeQueues only")
    parser.add_argument("--force", action="store_true", help="delete existing consumequeue/ (and index/) first")
    parser.add_argument("--consume-queue-units-per-file", type=int, help="default 300000 (StoreConfig)")
    parser.add_argument("--index-hash-slot-num", type=int, help="default 5000000 (StoreConfig)")
    parser.add_argument("--index-num-max", type=int, help="default 20000000 (StoreConfig)")
    parser.add_argument("--delay-levels", help="the store's messageDelayLevel (SCHEDULE_TOPIC_XXXX tags codes)")
    cli.add_spark_arguments(parser)
    args = parser.parse_args(argv)
    roots = roots_from_args(parser, args)
    for _, root in roots:
        if (Path(root) / "abort").exists() and not args.force:
            cli.err_console.print(
                f"{root}/abort exists: the store is running or did not stop cleanly; stop it (or pass --force)"
            )
            return 2
    spark = cli.session(args, "rebuild")
    try:
        with cli.progress(spark, "rebuild", not args.no_progress):
            s = run(
                spark,
                roots,
                args.output,
                not args.no_index,
                args.force,
                args.consume_queue_units_per_file,
                args.index_hash_slot_num,
                args.index_num_max,
                args.delay_levels,
            )
    except FileExistsError as exc:
        cli.err_console.print(str(exc))
        return 2
    cli.console.print(
        cli.table(
            "Rebuilt",
            ("what", "count"),
            [
                ("queues", s.queues),
                ("ConsumeQueue units", s.units),
                ("ConsumeQueue files", s.consume_queue_files),
                ("IndexFiles", s.index_files),
                ("index keys", s.index_keys),
            ],
        )
    )
    for directory in s.lite_index_removed:
        cli.console.print(
            f"removed the lite index {directory}: the store rebuilds it from the CommitLog when it starts"
        )
    if args.output:
        cli.console.print("the store roots' lite indexes (lite/) were left alone: remove them where these files go")
    cli.console.print(f"done in {s.elapsed_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run_job(main))
