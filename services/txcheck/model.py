"""What the transaction checker needs from the store and from the brokers, and what it reports.

No gRPC here: ``rpc/store_client.py`` and ``rpc/broker_client.py`` implement
``TxStore`` and ``Producers`` over the store's and the brokers' gRPC APIs; tests implement
them in memory. Records are the store's own ``MessageRecord`` (RocketMQ field names); the
topics, group and properties the checker reads and writes are in ``services.domain.names``,
``services.domain.format.properties_format`` and ``services.domain.contracts.transaction``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from services.domain.format.commitlog_format import MessageRecord


class StoreUnavailable(Exception):
    """The store did not answer, or refused a write the checker must make: the pass stops
    (its progress so far is committed) and is retried later."""


@dataclass(frozen=True, slots=True)
class Page:
    """A read of one queue: ``records`` in queue order (each with its queue_offset);
    ``next_offset`` is where to read on (beyond a removed or missing stretch too)."""

    records: list[MessageRecord]
    next_offset: int


@dataclass(frozen=True, slots=True)
class Appended:
    queue_offset: int
    phy_offset: int
    store_timestamp_ms: int


class TxStore(Protocol):
    """The store calls the checker makes. Failures raise ``StoreUnavailable``."""

    def read(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> Page: ...

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset); (0, 0) for a queue that never held a message."""

    def append(self, record: MessageRecord) -> Appended:
        """PutMessages of one record (system topics allowed); StoreUnavailable unless PUT_OK."""

    def commit_offset(self, topic: str, queue_id: int, offset: int) -> None:
        """CommitConsumerOffset for group CID_RMQ_SYS_TRANS."""

    def committed_offset(self, topic: str, queue_id: int) -> int:
        """QueryConsumerOffset for group CID_RMQ_SYS_TRANS; -1 if never committed."""

    def find_by_key(self, topic: str, key: str, max_num: int) -> list[MessageRecord]:
        """QueryMessagesByKey (a UNIQ_KEY or a KEYS word)."""


class CheckOutcome(enum.Enum):
    SENT = "sent"                      # a producer of the group got the command
    NO_PRODUCER = "no_producer"        # every broker answered: no producer of the group connected
    UNREACHABLE = "unreachable"        # no broker answered


@dataclass(frozen=True, slots=True)
class CheckRequest:
    producer_group: str
    topic: str                         # the real topic
    message_id: str
    transaction_id: str
    half: MessageRecord                # the copy just appended (offsets and store time set)


class Producers(Protocol):
    def check(self, request: CheckRequest) -> CheckOutcome:
        """Ask some broker to relay the check to a live producer of the group. Never raises."""


@dataclass(frozen=True, slots=True)
class TxCheckStats:
    """Counters since the process started, and the offsets seen by the last pass."""

    passes: int = 0
    pass_failures: int = 0
    checks_sent: int = 0
    results: tuple[tuple[str, int], ...] = ()   # (commit | rollback | unknown, count)
    no_producer_retries: int = 0                 # checks that reached no producer: asked again, not counted
    broker_unreachable_retries: int = 0
    moved_to_max_time_topic: int = 0
    immunity_pushbacks: int = 0
    resolved: int = 0                            # half records passed because an op record lists them
    half_offset: int = 0                         # committed progress in RMQ_SYS_TRANS_HALF_TOPIC
    half_max_offset: int = 0
    op_offset: int = 0                           # committed progress in RMQ_SYS_TRANS_OP_HALF_TOPIC
    op_max_offset: int = 0

    @property
    def half_lag(self) -> int:
        return max(0, self.half_max_offset - self.half_offset)

    @property
    def op_lag(self) -> int:
        return max(0, self.op_max_offset - self.op_offset)
