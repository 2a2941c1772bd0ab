"""Reading ``[start, end)`` of one queue through the broker, for the "rocketmq" source's tasks.

Two ways, chosen by the ``pullMethod`` option:

* ``records`` (default): ``pyrmq.pull.v1.Pull/PullRecords``. One call streams the whole range
  (at most ``RECORDS_PER_CALL_MAX`` records, so one call's deadline bounds a bounded amount of
  work), each response carrying up to ``pullBatchSize`` raw CommitLog records; they are
  gathered into ~``BATCH_ROWS`` rows and decoded at once by the numpy/Arrow CommitLog decoder
  (``pipeline/records.py``). A broker that answers UNIMPLEMENTED (another RocketMQ 5 proxy)
  is read with PullMessage instead, and remembered as such for the rest of the process.
* ``messages``: v2 ``PullMessage``, one message per streamed response, converted by
  ``pipeline/messages.py``.

Both keep the same exactly-once and data-loss rules (broker_source.py's docstring): nothing at
or past ``end`` is yielded, ILLEGAL_OFFSET with a later next offset is data loss (failOnDataLoss),
a queue that ends before ``end`` is data loss, any other non-OK status fails the task.
No pyspark import here (tests run it without Spark).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import DataLossError
from pipeline.options import SourceOptions

if TYPE_CHECKING:
    from apache.rocketmq.v2 import definition_pb2 as d

    from pipeline.client import Client, RouteQueue

log = logging.getLogger(__name__)
BATCH_ROWS = 4096  # rows per Arrow batch a reader yields (several pulls)
RECORDS_PER_CALL_MAX = 1 << 16  # records one PullRecords call covers at most


def lost(opts: SourceOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(message + " (set failOnDataLoss=false to skip what is gone)")
    log.warning("%s; failOnDataLoss=false: continuing", message)


class QueueSpan(Protocol):
    """``[start, end)`` of one queue, and the broker endpoint serving it (broker_source's
    QueueRange)."""

    @property
    def topic(self) -> str: ...
    @property
    def broker(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


def read_range(opts: SourceOptions, partition: QueueSpan) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the messages of ``[partition.start, partition.end)`` of one queue."""
    from pipeline.client import Client, RouteQueue
    from pipeline.errors import RecordsUnsupported

    client = Client(opts.endpoints, opts.fetch_retries, opts.fetch_retry_interval_ms)
    route = RouteQueue(partition.topic, partition.broker, partition.queue_id, partition.endpoint)
    if opts.pull_method == "records":
        reader = _read_records(opts, client, route, partition.start, partition.end)
        try:
            first = next(reader, None)
        except RecordsUnsupported:
            log.info("broker %s does not serve pyrmq.pull.v1.Pull; reading with PullMessage", route.endpoint)
        else:
            if first is not None:
                yield first
                yield from reader
            return
    yield from _read_messages(opts, client, route, partition.start, partition.end)


def _check(
    opts: SourceOptions, route: RouteQueue, code: int, text: str, offset: int, next_offset: int, end: int, what: str
) -> bool:
    """Apply the status rules to one pull's outcome; False: stop reading (the queue ended)."""
    from pipeline.client import ILLEGAL_OFFSET, MESSAGE_NOT_FOUND, OK
    from services.v2client.client import BrokerCallError

    name = f"{route.topic}/{route.broker}/{route.queue_id}"
    if code == ILLEGAL_OFFSET and next_offset > offset:
        lost(opts, f"queue {name}: offsets {offset}..{next_offset - 1} were removed while reading ({text})")
    elif code not in (OK, MESSAGE_NOT_FOUND):
        raise BrokerCallError(f"{what} {route.topic}/{route.queue_id}@{offset}", code, text)
    elif next_offset <= offset:
        lost(opts, f"queue {name}: ends at {offset}, before the planned end {end} (truncated?)")
        return False
    return True


def _read_messages(
    opts: SourceOptions, client: Client, route: RouteQueue, offset: int, end: int
) -> Iterator[pa.RecordBatch]:
    from pipeline.messages import to_batch

    pending: list[d.Message] = []
    while offset < end:
        code, text, messages, next_offset = client.pull(
            route,
            offset,
            min(opts.pull_batch_size, end - offset),
            opts.sub_expression,
            opts.pull_timeout_ms / 1000,
            expression_type=opts.expression_type,
        )
        if not _check(opts, route, code, text, offset, next_offset, end, "PullMessage"):
            break
        pending += [m for m in messages if offset <= m.system_properties.queue_offset < end]
        offset = next_offset
        if len(pending) >= BATCH_ROWS:
            yield to_batch(route.broker, pending)
            pending = []
    if pending:
        yield to_batch(route.broker, pending)


def _read_records(
    opts: SourceOptions, client: Client, route: RouteQueue, offset: int, end: int
) -> Iterator[pa.RecordBatch]:
    """PullRecords calls until ``end``; RecordsUnsupported from the first one if the broker has
    no such service."""
    from pipeline.client import OK

    pending: list[bytes] = []
    count = 0
    start = offset
    while offset < end:
        call_end = min(end, offset + RECORDS_PER_CALL_MAX)
        replies = client.pull_records(
            route,
            offset,
            call_end,
            opts.pull_batch_size,
            opts.expression_type,
            opts.sub_expression,
            opts.pull_timeout_ms / 1000,
        )
        ended = replied = False
        for reply in replies:
            replied = True
            if not _check(opts, route, reply.code, reply.text, offset, reply.next_offset, end, "PullRecords"):
                ended = True
                break
            if reply.code == OK and reply.count:
                pending.append(reply.records)
                count += reply.count
            offset = reply.next_offset
            if count >= BATCH_ROWS:
                yield _decode(route, pending, count, start, end)
                pending, count = [], 0
        replies.close()
        if ended:
            break
        if not replied:
            from pipeline.client import INTERNAL_SERVER_ERROR
            from services.v2client.client import BrokerCallError

            raise BrokerCallError(
                f"PullRecords {route.topic}/{route.queue_id}@{offset}",
                INTERNAL_SERVER_ERROR,
                "the stream ended without a response",
            )
    if count:
        yield _decode(route, pending, count, start, end)


def _decode(route: RouteQueue, chunks: list[bytes], count: int, start: int, end: int) -> pa.RecordBatch:
    from pipeline.records import records_to_batch

    batch = records_to_batch(route.broker, b"".join(chunks), f"PullRecords {route.topic}/{route.queue_id}", count)
    offsets = batch.column("queueOffset")
    low, high = pc.min_max(offsets).values()
    if low.as_py() < start or high.as_py() >= end:  # never expected from pyrmq: the broker stops at end
        batch = batch.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
    return batch
