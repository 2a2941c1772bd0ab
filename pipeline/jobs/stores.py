"""The store roots a job reads, and the DataFrames over them that every job starts from.

A job takes one store root or several (the broker groups of a cluster: ``pyrmq up --groups 2``
keeps broker-a's at ``DATA_DIR/store`` and broker-b's at ``DATA_DIR/broker-b/store``), named with
``--broker-names broker-a,broker-b`` in the order given. The names fill the sources'
``brokerName`` column, and the jobs keep the roots apart by it: a phy offset means something only
within its own CommitLog. One root may go unnamed (``brokerName`` null), as before groups.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict, TypeGuard, Unpack

from pipeline.errors import OptionError
from pipeline.options import pair_roots

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession

Roots = tuple[tuple[str | None, str], ...]  # (brokerName or None, store root)


class CommitLogOptions(TypedDict, total=False):
    """Options of the rocketmq-commitlog source a job sets (pipeline/store_source.py)."""

    verifyCrc: str  # "true": fill crcValid
    failOnCrcError: str  # "false": a CRC mismatch shows in crcValid, the read goes on
    delayLevels: str  # the store's messageDelayLevel (tagsCode on SCHEDULE_TOPIC_XXXX)


def _paired(stores: Sequence[str] | Roots) -> TypeGuard[Roots]:
    """Roots already paired with their names, not paths."""
    return bool(stores) and all(isinstance(s, tuple) for s in stores)


def as_roots(stores: str | Sequence[str] | Roots, broker_names: Sequence[str] | str | None = None) -> Roots:
    """Roots from a path, a list of paths (with ``broker_names``), or roots already paired;
    OptionError on the sources' rules (several roots need distinct names, one per root)."""
    if isinstance(stores, str):
        stores = [stores]
    if _paired(stores):
        return tuple(stores)
    names = broker_names if broker_names is None or isinstance(broker_names, str) else ",".join(broker_names)
    return pair_roots([str(s) for s in stores], names)


def add_store_arguments(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("stores", nargs="+", metavar="STORE_ROOT", help=help_text + " (several: one per broker group)")
    parser.add_argument(
        "--broker-names",
        metavar="NAMES",
        help="the broker name of each STORE_ROOT, comma-separated, in order (required with several roots)",
    )


def roots_from_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, stores: list[str] | None = None
) -> Roots:
    try:
        return as_roots(args.stores if stores is None else stores, args.broker_names)
    except OptionError as exc:
        parser.error(str(exc).replace("option 'brokerNames'", "--broker-names"))


def reader_over(reader: DataFrameReader, roots: Roots) -> DataFrame:
    """``reader.load`` of the roots, naming them when they are named."""
    names = [name for name, _ in roots]
    if any(name is not None for name in names):
        reader = reader.option("brokerNames", ",".join(str(n) for n in names))
    paths = [path for _, path in roots]
    return reader.load(paths[0] if len(paths) == 1 else paths)


def dispatchable(df: DataFrame) -> DataFrame:
    """Records the store dispatches: SYSFLAG transaction type NOT (0) or COMMIT (8)."""
    from pyspark.sql import functions as F

    kind = F.col("sysFlag").bitwiseAND(0xC)
    return df.where((kind == 0) | (kind == 8))


def commitlog_frame(
    spark: SparkSession,
    stores: str | Sequence[str] | Roots,
    columns: Sequence[str],
    topics: Sequence[str] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    **options: Unpack[CommitLogOptions],
) -> DataFrame:
    """The commitlog source over the roots with ``columns`` selected (decoded only those) and
    the filters."""
    from pyspark.sql import functions as F

    from pipeline.schema import COMMITLOG_COLUMNS, ddl

    kinds = dict(COMMITLOG_COLUMNS)
    wanted = set(columns) | ({"topic"} if topics else set()) | ({"storeTimestamp"} if since_ms or until_ms else set())
    schema = ddl([(name, kinds[name]) for name, _ in COMMITLOG_COLUMNS if name in wanted])
    reader = spark.read.format("rocketmq-commitlog").schema(schema)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    df = reader_over(reader, as_roots(stores))
    if topics:
        df = df.where(F.col("topic").isin(list(topics)))
    if since_ms is not None:
        df = df.where(F.col("storeTimestamp") >= F.timestamp_millis(F.lit(since_ms)))
    if until_ms is not None:
        df = df.where(F.col("storeTimestamp") < F.timestamp_millis(F.lit(until_ms)))
    return df.select(*columns)


def consumequeue_frame(spark: SparkSession, stores: str | Sequence[str] | Roots) -> DataFrame:
    return reader_over(spark.read.format("rocketmq-consumequeue"), as_roots(stores))


def same_broker(left: str, right: str) -> Column:
    """Join condition on ``left.brokerName`` and ``right.brokerName`` (null-safe: an unnamed root)."""
    from pyspark.sql import functions as F

    return F.col(f"{left}.brokerName").eqNullSafe(F.col(f"{right}.brokerName"))
