"""The "rocketmq" data source: topics through the broker, batch and streaming, read and write.

Reads use the v2 offset RPCs (``services/broker/pull.py``): QueryRoute for the queues,
QueryOffset for earliest / latest / by-timestamp offsets; a task reads ``[start, end)`` of one
queue with PullRecords (raw CommitLog records) or PullMessage (``pipeline/broker_read.py``).
With ``subscribePattern`` the topics are the broker's non-system topics whose name matches
(Admin/ListTopics), looked up at every planning step: a topic that starts matching later joins
the next micro-batch from its earliest offset, like any new queue. Options:
``pipeline/options.py``; offsets and their JSON: ``pipeline/offsets.py``.

Exactly-once reads: a micro-batch is a pair of offset dicts (canonical JSON, in Spark's
checkpoint) and a partition reads exactly ``[start, end)`` of its queue, dropping anything a
pull returns past ``end``; a restart replays the same ranges. When nothing is new,
``latestOffset`` returns the start unchanged, so an idle query runs no batches.

Data loss (``failOnDataLoss``): a start offset below the queue's earliest (retention), a pull
answering ILLEGAL_OFFSET, a queue in the checkpoint that the route no longer has, or a new queue
whose earliest offset is not 0: the query fails, naming the queue; with
``failOnDataLoss=false`` it logs and continues at the earliest offset.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipeline import offsets as off
from pipeline.broker_read import lost, read_range
from pipeline.errors import OptionError
from pipeline.options import SourceOptions, parse_sink_options, parse_source_options
from pipeline.schema import BROKER_COLUMNS, ddl

if TYPE_CHECKING:
    import pyarrow as pa
    from apache.rocketmq.v2 import definition_pb2 as d

    from pipeline.client import Client, RouteQueue
    from pipeline.messages import SendKey, SinkColumns

log = logging.getLogger(__name__)
FORMAT = "rocketmq"
EARLIEST_POLICY, LATEST_POLICY, TIMESTAMP_POLICY = 0, 1, 2  # v2 QueryOffsetPolicy


@dataclass(frozen=True)
class QueueRange(InputPartition):
    topic: str
    broker: str
    queue_id: int
    endpoint: str
    start: int
    end: int


def _client(opts: SourceOptions) -> Client:
    from pipeline.client import Client

    return Client(opts.endpoints, opts.fetch_retries, opts.fetch_retry_interval_ms)


def _topics(opts: SourceOptions) -> tuple[str, ...]:
    """The subscribed topics; with subscribePattern, the broker's non-system topics whose whole
    name matches (asked again at every call, so a new topic joins the next micro-batch)."""
    if opts.subscribe_pattern is None:
        return opts.topics
    pattern = re.compile(opts.subscribe_pattern)
    return tuple(t for t in _client(opts).list_topics() if pattern.fullmatch(t))


def _route(opts: SourceOptions) -> dict[off.Queue, RouteQueue]:
    """Queue -> RouteQueue for the subscribed / matching / assigned queues."""
    client = _client(opts)
    routed = {(q.topic, q.broker, q.queue_id): q for topic in _topics(opts) for q in client.route(topic)}
    if opts.assign is None:
        return routed
    wanted = off.parse_assign(opts.assign)
    brokers = {t: sorted({b for (tt, b, _) in routed if tt == t}) for t in opts.topics}
    resolved = off.resolve_brokers(dict.fromkeys(wanted, 0), brokers, "assign")
    missing = [q for q in resolved if q not in routed]
    if missing:
        raise OptionError(f"option 'assign': queues {missing} are not in the route of their topics")
    return {q: routed[q] for q in resolved}


def _resolve(
    opts: SourceOptions,
    queues: Mapping[off.Queue, RouteQueue],
    spec: str,
    option: str,
    default_policy: int,
    timestamp: int | None = None,
    by_timestamp: str | None = None,
) -> dict[off.Queue, int]:
    """Concrete offsets for ``queues`` from an option value (earliest / latest / JSON) or a
    timestamp (which takes precedence, as in Spark's Kafka source)."""
    client = _client(opts)
    topics = set(opts.topics) | {q[0] for q in queues}
    brokers = {t: sorted({b for (tt, b, _) in queues if tt == t}) for t in topics}
    if by_timestamp is not None:
        stamps = off.resolve_brokers(off.parse_offsets(by_timestamp, option + "ByTimestamp", False), brokers, option)
        return {
            q: (
                client.query_offset(route, TIMESTAMP_POLICY, stamps[q])
                if q in stamps
                else client.query_offset(route, default_policy)
            )
            for q, route in queues.items()
        }
    if timestamp is not None:
        return {q: client.query_offset(route, TIMESTAMP_POLICY, timestamp) for q, route in queues.items()}
    if spec in ("earliest", "latest"):
        policy = EARLIEST_POLICY if spec == "earliest" else LATEST_POLICY
        return {q: client.query_offset(route, policy) for q, route in queues.items()}
    given = off.resolve_brokers(off.parse_offsets(spec, option), brokers, option)
    unknown = sorted(q for q in given if q not in queues)
    if unknown:
        raise OptionError(f"option {option!r}: queues {unknown} are not subscribed or not in the route")
    out: dict[off.Queue, int] = {}
    for q, route in queues.items():
        value = given.get(q, off.EARLIEST if default_policy == EARLIEST_POLICY else off.LATEST)
        out[q] = (
            client.query_offset(route, EARLIEST_POLICY if value == off.EARLIEST else LATEST_POLICY)
            if value < 0
            else value
        )
    return out


def _checked_start(opts: SourceOptions, queue: off.Queue, route: RouteQueue, start: int | None) -> int:
    """``start``, or the earliest offset when ``start`` is gone (or None: a new queue)."""
    earliest = _client(opts).query_offset(route, EARLIEST_POLICY)
    if start is None:
        if earliest != 0:
            lost(opts, f"new queue {queue} starts at offset {earliest}, not 0: messages were removed")
        return earliest
    if start < earliest:
        lost(opts, f"queue {queue}: offsets {start}..{earliest - 1} were removed (earliest is {earliest})")
        return earliest
    return start


def _split(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Cut ranges so there are at least ``min_partitions`` (largest ranges first, as Kafka)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out: list[QueueRange] = []
    for r in ranges:
        share = -(-min_partitions * (r.end - r.start) // total) if total else 1  # ceil: at least min_partitions
        pieces = max(1, min(r.end - r.start, share))
        step = -(-(r.end - r.start) // pieces)
        out += [
            QueueRange(r.topic, r.broker, r.queue_id, r.endpoint, lo, min(r.end, lo + step))
            for lo in range(r.start, r.end, step)
        ]
    return out


class BatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = parse_source_options(options, streaming=False)

    def partitions(self) -> list[QueueRange]:
        opts = self.options
        queues = _route(opts)
        starts = _resolve(
            opts,
            queues,
            opts.starting_offsets,
            "startingOffsets",
            EARLIEST_POLICY,
            opts.starting_timestamp,
            opts.starting_offsets_by_timestamp,
        )
        ends = _resolve(
            opts,
            queues,
            opts.ending_offsets,
            "endingOffsets",
            LATEST_POLICY,
            opts.ending_timestamp,
            opts.ending_offsets_by_timestamp,
        )
        ranges: list[QueueRange] = []
        for q, route in queues.items():
            start = _checked_start(opts, q, route, starts[q])
            if ends[q] < starts[q]:
                raise OptionError(f"queue {q}: ending offset {ends[q]} is before the starting offset {starts[q]}")
            if ends[q] > start:
                ranges.append(QueueRange(q[0], q[1], q[2], route.endpoint, start, ends[q]))
        return _split(ranges, opts.min_partitions) or [QueueRange("", "", 0, "", 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange), partition  # one that partitions() planned
        if partition.end > partition.start:
            yield from read_range(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = parse_source_options(options, streaming=True)
        self._target: dict[off.Queue, int] | None = None  # Trigger.AvailableNow: stop here
        self._latest: dict[off.Queue, int] | None = None

    def initialOffset(self) -> off.NestedOffsets:
        opts = self.options
        return off.canonical(
            _resolve(
                opts,
                _route(opts),
                opts.starting_offsets,
                "startingOffsets",
                LATEST_POLICY,
                opts.starting_timestamp,
                opts.starting_offsets_by_timestamp,
            )
        )

    def _ends(self) -> tuple[dict[off.Queue, RouteQueue], dict[off.Queue, int]]:
        queues = _route(self.options)
        client = _client(self.options)
        ends = {q: client.query_offset(route, LATEST_POLICY) for q, route in queues.items()}
        return queues, ends

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: off.NestedOffsets, limit: ReadLimit) -> off.NestedOffsets:
        begin = off.from_nested(start)
        queues, ends = self._ends()
        self._latest = dict(ends)
        if self._target is not None:
            ends = {q: min(e, self._target.get(q, begin.get(q, 0))) for q, e in ends.items()}
        vanished = sorted(q for q in begin if q not in queues)
        if vanished:
            lost(self.options, f"queues {vanished} are no longer in the route")
        # A new queue starts at its earliest offset (checked again in partitions()).
        client = _client(self.options)
        full_start = {q: begin[q] if q in begin else client.query_offset(queues[q], EARLIEST_POLICY) for q in ends}
        ends = {q: max(e, full_start[q]) for q, e in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = off.rate_limit(full_start, ends, limit.max_rows)
        merged = {**{q: v for q, v in begin.items() if q not in vanished}, **ends}
        if all(merged[q] == full_start.get(q, merged[q]) for q in merged) and set(merged) == set(begin):
            return off.canonical(begin)  # nothing new: the same JSON, so no micro-batch
        return off.canonical(merged)

    def reportLatestOffset(self) -> off.NestedOffsets | None:
        return off.canonical(self._latest) if self._latest is not None else None

    def partitions(self, start: off.NestedOffsets, end: off.NestedOffsets) -> list[QueueRange]:
        opts = self.options
        begin, finish = off.from_nested(start), off.from_nested(end)
        queues = _route(opts)
        ranges: list[QueueRange] = []
        for q, stop in finish.items():
            route = queues.get(q)
            if route is None:
                lost(opts, f"queue {q} is no longer in the route")
                continue
            first = _checked_start(opts, q, route, begin.get(q))
            if stop > first:
                ranges.append(QueueRange(q[0], q[1], q[2], route.endpoint, first, stop))
        return _split(ranges, opts.min_partitions) or [QueueRange("", "", 0, "", 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange), partition  # one that partitions() planned
        if partition.end > partition.start:
            yield from read_range(self.options, partition)

    def commit(self, end: off.NestedOffsets) -> None:
        group = self.options.consumer_group
        if not group:
            return
        from pipeline.client import RouteQueue

        client = _client(self.options)
        queues = _route(self.options)
        for q, offset in off.from_nested(end).items():
            route = queues.get(q) or RouteQueue(q[0], q[1], q[2], self.options.endpoints[0])
            try:
                client.update_offset(group, route, offset)
            except Exception as exc:  # noqa: BLE001 - monitoring only; Spark's checkpoint is the truth
                log.warning("UpdateOffset %s %s -> %d failed: %s", group, q, offset, exc)

    def stop(self) -> None:
        from pipeline.client import close_all

        close_all()


# -- sink --------------------------------------------------------------------------------------


@dataclass
class SinkCommit(WriterCommitMessage):
    messages: int
    first_id: str | None
    last_id: str | None


def write_batches(
    options: Mapping[str, str], columns: SinkColumns, id_prefix: str, batches: Iterable[pa.RecordBatch]
) -> SinkCommit:
    from pipeline.client import Client
    from pipeline.messages import to_messages

    opts = parse_sink_options(options)
    client = Client(opts.endpoints)
    sent, row = 0, 0
    first: str | None = None
    last: str | None = None
    for batch in batches:
        groups: dict[SendKey, list[d.Message]] = {}
        for key, message in to_messages(batch, columns, opts.topic, id_prefix, row):
            groups.setdefault(key, []).append(message)
        row += batch.num_rows
        for messages in groups.values():
            for i in range(0, len(messages), opts.send_batch_size):
                chunk = messages[i : i + opts.send_batch_size]
                client.send(chunk, opts.endpoints[sent // opts.send_batch_size % len(opts.endpoints)])
                first = first or chunk[0].system_properties.message_id
                last = chunk[-1].system_properties.message_id
                sent += len(chunk)
    return SinkCommit(sent, first, last)


def _task_prefix(write_id: str) -> str:
    """write id / micro-batch / partition: with the row index, a message id that a retried task
    (or a replayed micro-batch) produces again."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return write_id
    try:
        query = context.getLocalProperty("sql.streaming.queryId") or write_id
        batch = context.getLocalProperty("streaming.sql.batchId") or "0"
    except Exception:  # noqa: BLE001 - local properties not passed to this worker
        query, batch = write_id, "0"
    return f"{query}/{batch}/{context.partitionId()}"


class _SinkWriter:
    """What the batch and the streaming writer share: the columns to send, and sending a task's
    Arrow batches (one write id per writer; with the task and row it makes each message's id,
    so a retried task sends the same ids again)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        import uuid

        from pipeline.messages import sink_columns

        self.options = dict(options)
        self.columns = sink_columns(schema, parse_sink_options(options).topic)
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_batches(self.options, self.columns, _task_prefix(self.write_id), iterator)


def _sent(messages: list[WriterCommitMessage | None]) -> int:
    """Messages sent by the tasks that finished (None: a task that failed)."""
    return sum(m.messages for m in messages if isinstance(m, SinkCommit))


class BatchWriter(_SinkWriter, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("rocketmq sink: %d messages sent", _sent(messages))


class StreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("rocketmq sink: batch %d, %d messages sent", batchId, _sent(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("rocketmq sink: batch %d aborted (messages already sent stay sent: at-least-once)", batchId)


class RocketMQDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("rocketmq")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ddl(BROKER_COLUMNS)

    def _check_schema(self, schema: StructType) -> None:
        if [(f.name, f.dataType.simpleString()) for f in schema.fields] != list(BROKER_COLUMNS):
            raise OptionError(
                "the rocketmq source has a fixed schema; do not set one (.schema(...)): " + ddl(BROKER_COLUMNS)
            )

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return BatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self.options, schema)
