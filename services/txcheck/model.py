"""What the transaction checker needs from the store and from the brokers, and what it reports.

No gRPC here: the store client (``services.store.client``) serves ``TxStore``, and
``rpc/broker_client.py`` implements ``Producers`` over the brokers' admin API. Records are the
store client's ``StoredMessage`` and ``MessageToPut`` (RocketMQ field names); the
topics, group and properties the checker reads and writes are in ``services.domain.names``,
``services.domain.format.properties_format`` and ``services.domain.contracts.transaction``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.store.client.model import GetOutcome, MessageToPut, PutOutcome, StoredMessage


class TxStore(Protocol):
    """The store calls the checker makes (the store client's). Failures raise ``StoreError``."""

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetOutcome:
        """A read of one queue: ``messages`` in queue order; ``next_begin_offset`` is where to
        read on (beyond a removed or missing stretch too)."""

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset); (0, 0) for a queue that never held a message."""

    def put_messages(self, messages: Sequence[MessageToPut], allow_system_topics: bool = False) -> list[PutOutcome]:
        """One PutMessages (the checker's allow system topics)."""

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """-1 if never committed."""

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        """QueryMessagesByKey (a UNIQ_KEY or a KEYS word)."""


class CheckOutcome(enum.Enum):
    SENT = "sent"  # a producer of the group got the command
    NO_PRODUCER = "no_producer"  # every broker answered: no producer of the group connected
    UNREACHABLE = "unreachable"  # no broker answered


@dataclass(frozen=True, slots=True)
class CheckRequest:
    producer_group: str
    topic: str  # the real topic
    message_id: str
    transaction_id: str
    half: StoredMessage  # the copy just appended (offsets and store time set)


class Producers(Protocol):
    def check(self, request: CheckRequest) -> CheckOutcome:
        """Ask some broker to relay the check to a live producer of the group. Never raises."""


@dataclass(frozen=True, slots=True)
class TxCheckStats:
    """Counters since the process started, and the offsets seen by the last pass."""

    passes: int = 0
    pass_failures: int = 0
    checks_sent: int = 0
    results: tuple[tuple[str, int], ...] = ()  # (commit | rollback | unknown, count)
    no_producer_retries: int = 0  # checks that reached no producer: asked again, not counted
    broker_unreachable_retries: int = 0
    moved_to_max_time_topic: int = 0
    immunity_pushbacks: int = 0
    resolved: int = 0  # half records passed because an op record lists them
    half_offset: int = 0  # committed progress in RMQ_SYS_TRANS_HALF_TOPIC
    half_max_offset: int = 0
    op_offset: int = 0  # committed progress in RMQ_SYS_TRANS_OP_HALF_TOPIC
    op_max_offset: int = 0

    @property
    def half_lag(self) -> int:
        return max(0, self.half_max_offset - self.half_offset)

    @property
    def op_lag(self) -> int:
        return max(0, self.op_max_offset - self.op_offset)
