"""Classic pulls: RocketMQ's ``PullMessageProcessor`` over the store's raw reads, one pass at a
time (the remoting door's PULL_MESSAGE and LITE_PULL_MESSAGE; its hold service waits between
passes). No protocol here.

One pass reads up to ``PULL_MESSAGES_MAX`` (32) records / ``PULL_BYTES_MAX`` (256 KiB) from the
queue with the store's GetRawMessages (the tags codes of a TAG filter go with it), keeps the
records whose real tag matches (or whose properties pass the SQL92 filter, decoded only then),
and answers RocketMQ's ``GetMessageStatus`` with the records as the CommitLog holds them.
Outcomes as ``PullMessageProcessor`` maps them (``ClassicPullStatus``):

| store status | outcome |
|---|---|
| FOUND with records kept | FOUND |
| FOUND with none kept, NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING | RETRY_IMMEDIATELY (the client pulls again from next_begin_offset) |
| OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE | NOT_FOUND (caught up: a suspended pull waits) |
| NO_MESSAGE_IN_QUEUE | NOT_FOUND at offset 0, else OFFSET_MOVED |
| OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL, NO_MATCHED_LOGIC_QUEUE | OFFSET_MOVED (next_begin_offset: where to go) |
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from services.broker.consumer import Filter, tags_codes
from services.broker.pull import exact_matcher
from services.broker.raw_pull import RawStore, record_properties
from services.domain.statuses import GetStatus

PULL_MESSAGES_MAX = 32  # maxTransferCountOnMessageInMemory
PULL_BYTES_MAX = 256 * 1024  # maxTransferBytesOnMessageInMemory


class ClassicPullStatus(enum.Enum):
    FOUND = "FOUND"
    RETRY_IMMEDIATELY = "RETRY_IMMEDIATELY"
    NOT_FOUND = "NOT_FOUND"
    OFFSET_MOVED = "OFFSET_MOVED"


@dataclass(slots=True)
class ClassicPullResult:
    status: ClassicPullStatus
    store_status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PullFilter:
    """A parsed subscription: the store's tags codes and the exact check on each record."""

    codes: tuple[int, ...]
    matches: Callable[[Mapping[str, str]], bool] | None

    @classmethod
    def of(cls, message_filter: Filter) -> PullFilter:
        return cls(tuple(tags_codes(message_filter.tags)), exact_matcher(message_filter))


ALL = PullFilter((), None)
_RETRY = frozenset({GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING})
_CAUGHT_UP = frozenset({GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE})


def pull_once(
    store: RawStore, topic: str, queue_id: int, offset: int, max_nums: int, message_filter: PullFilter
) -> ClassicPullResult:
    """One read of the queue from ``offset``."""
    count = max(1, min(max_nums, PULL_MESSAGES_MAX))
    got = store.get_raw_messages(topic, queue_id, offset, count, PULL_BYTES_MAX, list(message_filter.codes))
    status = got.status
    records: list[bytes] = got.messages
    if status is GetStatus.FOUND:
        if message_filter.matches is not None:
            matches = message_filter.matches
            records = [r for r in records if matches(record_properties(r))]
        outcome = ClassicPullStatus.FOUND if records else ClassicPullStatus.RETRY_IMMEDIATELY
    elif status in _RETRY:
        outcome = ClassicPullStatus.RETRY_IMMEDIATELY
    elif status in _CAUGHT_UP:
        outcome = ClassicPullStatus.NOT_FOUND
    elif status is GetStatus.NO_MESSAGE_IN_QUEUE:
        outcome = ClassicPullStatus.NOT_FOUND if offset == 0 else ClassicPullStatus.OFFSET_MOVED
    else:
        outcome = ClassicPullStatus.OFFSET_MOVED
    return ClassicPullResult(outcome, status, got.next_begin_offset, got.min_offset, got.max_offset, records)
