"""Spark sources over a store root's files: "rocketmq-commitlog" and "rocketmq-consumequeue".

They read the files directly (the store may be running, or a copy, or a store written by Apache
RocketMQ itself: the layout is the same), so the path must be readable by every executor.

Several store roots at once (the broker groups of a cluster): ``.load([root_a, root_b])`` with
option ``brokerNames`` (``broker-a,broker-b``, one per root, in order), which fills the
``brokerName`` column; one root may go unnamed (null ``brokerName``).

``rocketmq-commitlog``: one partition per segment, or, with ``splitSize``, per ``splitSize``
bytes of a segment (each split finds its first record itself, see ``decode.find_record_start``).
Options: ``path``, ``fromOffset`` / ``toOffset`` (phy offsets: records starting in the range),
``verifyCrc`` (fill ``crcValid``; a mismatch fails the read unless ``failOnCrcError=false``),
``splitSize``, ``batchSize`` (rows per Arrow batch), ``delayLevels`` (the store's
messageDelayLevel, for ``tagsCode`` on SCHEDULE_TOPIC_XXXX). A user schema selects columns: only those
are decoded (``spark.read.format(...).schema("commitLogOffset bigint, topic string")``).

``rocketmq-consumequeue``: one partition per ConsumeQueue file; option ``topics`` (comma list)
restricts the topics.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.errors import OptionError
from pipeline.options import parse_store_file_options
from pipeline.schema import COMMITLOG_COLUMNS, CONSUMEQUEUE_COLUMNS, Columns, ddl

if TYPE_CHECKING:
    import pyarrow as pa

COMMITLOG_FORMAT = "rocketmq-commitlog"
CONSUMEQUEUE_FORMAT = "rocketmq-consumequeue"


def selected_columns(schema: StructType, columns: Columns, source: str) -> tuple[str, ...]:
    """The columns a (possibly user-given) schema selects, in our order; OptionError if it
    names an unknown column or gives one another type."""
    kinds = dict(columns)
    for field in schema.fields:
        if field.name not in kinds:
            raise OptionError(f"{source}: unknown column {field.name!r} in the schema; columns are " + ", ".join(kinds))
        if field.dataType.simpleString() != kinds[field.name]:
            raise OptionError(
                f"{source}: column {field.name!r} is {kinds[field.name]}, not {field.dataType.simpleString()}"
            )
    wanted = {f.name for f in schema.fields}
    names = tuple(name for name, _ in columns if name in wanted)
    if [f.name for f in schema.fields] != list(names):
        raise OptionError(f"{source}: list the schema's columns in the source's order: {', '.join(names)}")
    return names


@dataclass(frozen=True)
class SegmentSplit(InputPartition):
    broker_name: str | None
    path: str
    file_from_offset: int
    from_offset: int | None
    to_offset: int | None


class CommitLogReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_store_file_options(options)
        self.columns = selected_columns(schema, COMMITLOG_COLUMNS, COMMITLOG_FORMAT)

    def partitions(self) -> list[SegmentSplit]:
        opts = self.options
        splits: list[SegmentSplit] = []
        for broker_name, root in opts.roots:
            splits.extend(self._splits(broker_name, root))
        return splits or [SegmentSplit(None, "", 0, 0, 0)]

    def _splits(self, broker_name: str | None, root: str) -> list[SegmentSplit]:
        from pipeline.decode import segment_files

        opts = self.options
        splits: list[SegmentSplit] = []
        for start, path in segment_files(root):
            size = os.path.getsize(path)
            end = start + size
            low = start if opts.from_offset is None else max(start, opts.from_offset)
            high = end if opts.to_offset is None else min(end, opts.to_offset)
            if low >= high:
                continue
            step = opts.split_size or size
            cut = low
            while cut < high:
                upper = min(high, cut + step)
                splits.append(
                    SegmentSplit(
                        broker_name, str(path), start, None if cut == start else cut, None if upper == end else upper
                    )
                )
                cut = upper
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentSplit), partition  # one that partitions() planned
        if not partition.path:
            return
        from pipeline.decode import read_segment

        opts = self.options
        columns = self.columns
        check = opts.verify_crc and opts.fail_on_crc_error
        decode_columns = columns if not check or "crcValid" in columns else columns + ("crcValid",)
        if check and "commitLogOffset" not in decode_columns:
            decode_columns = ("commitLogOffset",) + decode_columns
        for batch in read_segment(
            Path(partition.path),
            partition.file_from_offset,
            partition.from_offset,
            partition.to_offset,
            opts.batch_rows,
            opts.verify_crc,
            decode_columns,
            opts.delay_level_millis,
            partition.broker_name,
        ):
            if check:
                _fail_on_crc(batch, partition.path)
            yield batch.select(list(columns)) if decode_columns != columns else batch


def _fail_on_crc(batch: pa.RecordBatch, path: str) -> None:
    import pyarrow.compute as pc

    bad = pc.invert(batch.column("crcValid"))
    if pc.any(bad).as_py():
        offsets = pc.filter(batch.column("commitLogOffset"), bad).to_pylist()
        raise ValueError(
            f"{COMMITLOG_FORMAT}: CRC mismatch in {path} at phy offset(s) {offsets[:10]} "
            f"({len(offsets)} in this batch); failOnCrcError=false reports them in crcValid"
        )


class CommitLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return COMMITLOG_FORMAT

    def schema(self) -> str:
        return ddl(COMMITLOG_COLUMNS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitLogReader(self.options, schema)


@dataclass(frozen=True)
class QueueFile(InputPartition):
    broker_name: str | None
    path: str
    topic: str
    queue_id: int
    file_from_offset: int


def consume_queue_files(path: str, topics: tuple[str, ...] = (), broker_name: str | None = None) -> list[QueueFile]:
    root = Path(path)
    directory = root / "consumequeue" if (root / "consumequeue").is_dir() else root
    if not directory.is_dir():
        raise FileNotFoundError(f"no ConsumeQueue directory at {root} (expected STORE_ROOT/consumequeue)")
    files: list[QueueFile] = []
    for topic_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        if topics and topic_dir.name not in topics:
            continue
        for queue_dir in sorted(
            (p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
        ):
            for file in sorted(queue_dir.iterdir()):
                if file.is_file() and file.name.isdigit():
                    files.append(QueueFile(broker_name, str(file), topic_dir.name, int(queue_dir.name), int(file.name)))
    return files


class ConsumeQueueReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_store_file_options(options)
        self.columns = selected_columns(schema, CONSUMEQUEUE_COLUMNS, CONSUMEQUEUE_FORMAT)

    def partitions(self) -> list[QueueFile]:
        opts = self.options
        files = [f for name, root in opts.roots for f in consume_queue_files(root, opts.topics, name)]
        return files or [QueueFile(None, "", "", 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueFile), partition  # one that partitions() planned
        if not partition.path:
            return
        from pipeline.decode import read_consume_queue

        all_columns = tuple(name for name, _ in CONSUMEQUEUE_COLUMNS)
        for batch in read_consume_queue(
            Path(partition.path),
            partition.topic,
            partition.queue_id,
            partition.file_from_offset,
            broker_name=partition.broker_name,
        ):
            yield batch if self.columns == all_columns else batch.select(list(self.columns))


class ConsumeQueueDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return CONSUMEQUEUE_FORMAT

    def schema(self) -> str:
        return ddl(CONSUMEQUEUE_COLUMNS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ConsumeQueueReader(self.options, schema)
