"""What a pop answers (no gRPC here): the pop's and an ack's status, and the messages handed out
with their receipt handles."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from services.domain.format.commitlog_format import MessageRecord
from services.store.model import decode_message


class PopStatus(enum.Enum):
    FOUND = "FOUND"  # at least one message
    NO_MESSAGE = "NO_MESSAGE"  # nothing available now: long-poll on arrivals in ``examined``


class AckStatus(enum.Enum):
    OK = "OK"
    # Malformed, unknown, superseded (a later delivery or change of invisible time), expired,
    # or for another group / topic.
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    # forward_to_dead_letter_queue only: the DLQ put failed; the message stays in flight and
    # the handle stays valid.
    DLQ_PUT_FAILED = "DLQ_PUT_FAILED"


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    raw: bytes  # the CommitLog record, as get_messages returns it
    topic: str  # the original topic (RETRY_TOPIC of a retry copy)
    source_topic: str  # where the record lives: ``topic`` or ``%RETRY%{group}_{topic}``
    queue_id: int  # of source_topic
    queue_offset: int  # of source_topic
    delivery_attempt: int  # >= 1
    receipt_handle: str

    @property
    def record(self) -> MessageRecord:
        """The decoded record (its ``topic`` is ``source_topic``)."""
        return decode_message(self.raw)


@dataclass(slots=True)
class PopResult:
    status: PopStatus
    messages: list[PoppedMessage] = field(default_factory=list)
    # (topic, queue id) looked at, in order: a long-polling broker waits for an arrival in one
    # of them (the store also announces a FIFO queue that unlocks).
    examined: list[tuple[str, int]] = field(default_factory=list)
