"""RawPullService: ``pyrmq.pull.v1.Pull/PullRecords``, pulls answered with raw CommitLog records.
No gRPC here (the servicer is ``v2/pull_servicer.py``; the proto documents every field).

Why it exists: v2 PullMessage (``pull.py``) streams one Message per response, and grpcio
costs the broker ~77 µs of CPU per streamed response on top of building each Message
(bench/RESULTS.md). RocketMQ's classic PULL_MESSAGE answers with the records as the CommitLog
holds them, concatenated; so does this. The broker reads them with the store's GetRawMessages
and never decodes a record unless a filter needs its properties: the unfiltered path is one
store call and one ``b"".join`` per response.

Semantics are PullMessage's, through the same code: ``OffsetService.check_queue`` (topic,
queue, broker name), ``consumer.parse_filter`` (TAG / SQL92; ILLEGAL_FILTER_EXPRESSION),
``offsets.exact_matcher`` (the real TAGS after the store's tags-code match, or the SQL
condition) and ``OffsetService.read`` (the store-status mapping, reading on past filtered-out
records, long polling on the ArrivalHub). What is added:

* ``end_offset`` (exclusive): the call streams responses until ``next_begin_offset`` reaches it,
  the queue is caught up, or an error; only the first read of a call may wait (long polling).
  A store read never asks for more than ``end - offset`` records, but a tag-filtered read scans
  the ConsumeQueue further than it returns (up to 16,000 units), so records at or past the end
  are dropped here and ``next_begin_offset`` is cut back to the end: the records beyond it are
  read again by whoever continues from there.
* ``consumer_group`` is optional (validated when set): nothing is recorded for it.
* Filters decode only what they need: ``decode_record(..., read_body=False)``, as the store's
  pop does for SQL.

Bounds: ``max_msg_nums`` <= ``RAW_PULL_BATCH_MAX`` records and ``max_msg_bytes`` <=
``RAW_PULL_BYTES_MAX`` per response (the store still returns one larger record alone, and a body
is at most 4 MiB, so a response stays under the broker's 16 MiB message limit).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from services.broker.consumer import FilterType, parse_filter, tags_codes, validate_group
from services.broker.errors import Code, RequestError
from services.broker.pull import Fetch, OffsetService, exact_matcher
from services.domain.format.commitlog_format import QUEUE_OFFSET_POS, MessageRecord, decode_record
from services.store.client.model import GetOutcome, GetStatus

RAW_PULL_BATCH_DEFAULT = 32
RAW_PULL_BATCH_MAX = 4096
RAW_PULL_BYTES_DEFAULT = 4 << 20
RAW_PULL_BYTES_MAX = 8 << 20
_QUEUE_OFFSET = struct.Struct(">q")
_READ_ON = (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_FOUND_NULL)


class RawStore(Protocol):
    """The store call behind PullRecords. Failures raise StoreCallError."""

    def get_raw_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int, tags_codes: list[int]
    ) -> GetOutcome:
        """GetRawMessages: ``messages`` are whole CommitLog records (bytes), in queue order."""


@dataclass(slots=True)
class RawPullRequest:
    topic: str
    queue_id: int
    queue_offset: int
    end_offset: int = 0  # exclusive; <= 0: none (one response)
    consumer_group: str = ""  # optional
    broker_name: str = ""
    max_msg_nums: int = 0  # 0: RAW_PULL_BATCH_DEFAULT
    max_msg_bytes: int = 0  # 0: RAW_PULL_BYTES_DEFAULT
    filter_type: FilterType = FilterType.TAG
    filter_expression: str = "*"
    suspend_timeout_ms: int = 0  # long polling of the first read; 0: none
    deadline_remaining_ms: int | None = None  # None: no gRPC deadline
    alive: Callable[[], bool] = lambda: True  # False once the caller cancelled the call


@dataclass(slots=True)
class RawPullResult:
    """One response: ``records`` are whole CommitLog records in queue order."""

    code: Code
    message: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)


def record_queue_offset(record: bytes) -> int:
    """The QUEUEOFFSET field of a raw record."""
    return _QUEUE_OFFSET.unpack_from(record, QUEUE_OFFSET_POS)[0]


def record_properties(record: bytes) -> Mapping[str, str]:
    """The properties of a raw record (TAGS included, the CRC trailer removed); the body is
    not copied."""
    decoded = decode_record(record, 0, len(record), check_crc=False, read_body=False)
    assert isinstance(decoded, MessageRecord), "a record read by queue offset, never a segment's blank end"
    return decoded.properties


class RawPullService:
    def __init__(self, offsets: OffsetService, store: RawStore) -> None:
        self._offsets = offsets
        self._store = store

    def pull(self, request: RawPullRequest) -> Iterator[RawPullResult]:
        """The responses of one PullRecords call. Raises BrokerError (before the first
        response) for a request that cannot be served."""
        end = self._check(request)
        message_filter = parse_filter(request.filter_type, request.filter_expression)
        codes = tags_codes(message_filter.tags)
        matches = exact_matcher(message_filter)
        count = min(request.max_msg_nums or RAW_PULL_BATCH_DEFAULT, RAW_PULL_BATCH_MAX)
        max_bytes = min(request.max_msg_bytes or RAW_PULL_BYTES_DEFAULT, RAW_PULL_BYTES_MAX)
        topic, queue_id = request.topic, request.queue_id

        def fetch(offset: int) -> GetOutcome:
            want = count if end is None else min(count, end - offset)
            got = self._store.get_raw_messages(topic, queue_id, offset, want, max_bytes, codes)
            if got.status not in _READ_ON:
                return got
            if end is not None and got.next_begin_offset > end:  # a filtered scan went past the end
                got.messages = [r for r in got.messages if record_queue_offset(r) < end]
                got.next_begin_offset = end
            if matches is not None:
                got.messages = [r for r in got.messages if matches(record_properties(r))]
            return got

        return self._responses(request, end, fetch)

    def _check(self, request: RawPullRequest) -> int | None:
        """Validate what does not need the store beyond the topic; the end offset or None."""
        if request.consumer_group:
            validate_group(request.consumer_group)
        self._offsets.check_queue(request.topic, request.queue_id, request.broker_name)
        if request.queue_offset < 0:
            raise RequestError(f"queue_offset must not be negative, got {request.queue_offset}", Code.ILLEGAL_OFFSET)
        if request.max_msg_nums < 0 or request.max_msg_bytes < 0:
            raise RequestError("max_msg_nums and max_msg_bytes must not be negative", Code.BAD_REQUEST)
        if request.suspend_timeout_ms < 0:
            raise RequestError("suspend_timeout_millis must not be negative", Code.ILLEGAL_POLLING_TIME)
        if request.end_offset <= 0:
            return None
        if request.end_offset <= request.queue_offset:
            raise RequestError(
                f"end_offset {request.end_offset} must be above queue_offset {request.queue_offset}", Code.BAD_REQUEST
            )
        return request.end_offset

    def _responses(self, request: RawPullRequest, end: int | None, fetch: Fetch) -> Iterator[RawPullResult]:
        offset = request.queue_offset
        wait_ms = self._offsets.polling_ms(request.suspend_timeout_ms, request.deadline_remaining_ms)
        while True:
            result = self._offsets.read(request.topic, offset, wait_ms, request.alive, fetch, end)
            yield RawPullResult(
                result.code, result.message, result.next_offset, result.min_offset, result.max_offset, result.messages
            )
            if result.code is not Code.OK or end is None or result.next_offset >= end or not request.alive():
                return
            offset, wait_ms = result.next_offset, 0
