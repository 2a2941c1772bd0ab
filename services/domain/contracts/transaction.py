"""Transactional messages: the half message the broker parks until the producer decides, and the
op records that say which halves are resolved (RocketMQ 5's ``TransactionalMessageBridge`` and
``TransactionalMessageUtil``).

Half message: the prepared message, in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, with
``__transactionId__`` (the transaction id, which is the message's UNIQ_KEY), REAL_TOPIC and
REAL_QID (``park_half``); ``TRAN_MSG=true``, ``PGROUP`` and the optional
``CHECK_IMMUNITY_TIME_IN_SECONDS`` come with the producer's own properties. ``read_half`` is what
its readers learn from it: the broker's EndTransaction (which half copies belong to a
transaction; a commit puts the half, properties unchanged, to its ``real_destination``) and the
transaction checker (which producer group to ask about which transaction).

Op record: one per resolution, in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, ``WAIT=true``,
body = the half queue offsets it settles, each followed by "," (RocketMQ 5's batched form;
4.x wrote one decimal offset) (``encode_op``). A reader takes the offsets of a tag ``d`` record,
splitting on "," and skipping empty and non-numeric pieces, and ignores records with another tag
(``decode_op``, RocketMQ's ``fillOpRemoveMap``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.domain.contracts.parking import park
from services.domain.format.properties_format import (
    PRODUCER_GROUP,
    REAL_TOPIC,
    TAGS,
    TRANSACTION_ID,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
)
from services.domain.names import TRANS_HALF_TOPIC

QUEUE_ID = 0  # the half, op and check-max-time topics each have one queue
OP_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG
OP_BODY_OFFSETS_MAX = 100_000  # pieces taken from one body (a 4 MiB body of "1," would be 2M)


@dataclass(frozen=True, slots=True)
class Half:
    """What a half message tells its readers."""

    real_topic: str
    transaction_id: str
    message_id: str  # UNIQ_KEY, else the transaction id
    producer_group: str  # PGROUP, else the real topic


def park_half(properties: dict[str, str], topic: str, queue_id: int, transaction_id: str) -> tuple[str, int]:
    """Park a prepared message: ``__transactionId__``, REAL_TOPIC and REAL_QID go into
    ``properties``; the (topic, queue) to put it in is returned."""
    properties[TRANSACTION_ID] = transaction_id
    park(properties, topic, queue_id)
    return TRANS_HALF_TOPIC, QUEUE_ID


def read_half(properties: dict[str, str]) -> Half | None:
    """The half message's real topic, transaction id, message id and producer group; None when
    it is no transaction half (no REAL_TOPIC, or neither ``__transactionId__`` nor UNIQ_KEY)."""
    real_topic = properties.get(REAL_TOPIC)
    transaction_id = properties.get(TRANSACTION_ID) or properties.get(UNIQ_KEY, "")
    if not real_topic or not transaction_id:
        return None
    return Half(
        real_topic,
        transaction_id,
        properties.get(UNIQ_KEY, transaction_id),
        properties.get(PRODUCER_GROUP) or real_topic,
    )


def encode_op(half_queue_offsets: Iterable[int]) -> tuple[dict[str, str], bytes]:
    """The properties and body of the op record that resolves ``half_queue_offsets``."""
    body = "".join(f"{offset}," for offset in half_queue_offsets).encode("ascii")
    return {WAIT_STORE_MSG_OK: "true", TAGS: OP_TAG}, body


def parse_op_body(body: bytes) -> list[int]:
    """The half queue offsets an op body lists ("12" or "12,13,"); garbage pieces are skipped."""
    offsets = []
    for piece in body.decode("ascii", errors="replace").split(",")[:OP_BODY_OFFSETS_MAX]:
        piece = piece.strip()
        if piece.isdigit():
            offsets.append(int(piece))
    return offsets


def decode_op(properties: dict[str, str], body: bytes) -> list[int]:
    """The half queue offsets an op record resolves; none for a record with another tag."""
    return parse_op_body(body) if properties.get(TAGS) == OP_TAG else []
