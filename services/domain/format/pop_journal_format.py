"""The pop journal's records (pyrmq's own format): the pop engine's state changes, written as
messages of the system topic ``rmq_sys_POP_JOURNAL`` queue 0 in the CommitLog, so they reach the
slave replicas on the Replicate stream with the messages and survive a store restart. RocketMQ
keeps pop checkpoints (CK) and acks in the CommitLog the same way (its revive topic); this
journal differs in what it records: pyrmq's pop keeps per-queue state (``services/store/pop``)
instead of moving the consumer offset at pop time, so the journal records that state's changes,
and a snapshot of it now and then, which a new master replays. Bodies only: the store's
``pop/journal.py`` writes and reads the records.

A record is one message: TAGS ``ops`` or ``snap``, body UTF-8 JSON, ``v`` 1, compact:

| field | JSON type | in | meaning |
|---|---|---|---|
| ``v`` | int | both | format version, 1 |
| ``sn`` | int | ``ops`` | queue offset (in the journal queue) of the first part of the last snapshot written before this record; -1: none yet (replay from the journal's first record) |
| ``ops`` | array of ops | ``ops`` | in the order the pop engine applied them: see below |
| ``part``, ``parts`` | int, int | ``snap`` | this part's index and the snapshot's part count; the first part lies at this record's queue offset - ``part`` (a snapshot's parts are written in one batch, so they are contiguous) |
| ``seq`` | int | ``snap`` | the highest receipt handle sequence issued when the snapshot was taken |
| ``qs`` | array of queue images | ``snap`` | the whole pop state, split over the parts |

Ops (arrays, the first element names the kind):

| op | elements | applied |
|---|---|---|
| ``["d", D...]`` | deliveries, each a ``Delivery`` array | each offset is in flight under that delivery (a pop, or a change of invisible time: a new handle); no longer finished or waiting to be redelivered |
| ``["f", F...]`` | finished offsets, each ``[group, source, queue_id, queue_offset, committed, acked (0/1)]`` (five elements: written before the flag, read as acked) | the offset is finished (acked: 1; moved to the retry topic or the DLQ: 0); ``committed`` is the queue's committed offset right after (the consumer offset the master wrote) |
| ``["r", group, source, queue_id, offset]`` | | the queue's state restarts at ``offset`` (a committed offset set from outside: CommitConsumerOffset, an admin reset) |

``Delivery``: ``[group, source, queue_id, topic, fifo (0/1), queue_offset, delivery_attempt,
sequence, pop_time_ms, invisible_ms, incarnation, suspended (0/1)]``: ``source`` is the topic the
record lives in (a retry topic for redeliveries), ``topic`` the one the group consumed; the
receipt handle is rebuilt from these fields.

Queue image: ``[group, source, queue_id, committed, [finished offsets above committed...],
[in-flight deliveries...], [expired FIFO deliveries waiting to be delivered again...]]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

POP_JOURNAL_VERSION = 1
TAG_OPS = "ops"
TAG_SNAPSHOT = "snap"
NO_SNAPSHOT = -1


class PopJournalFormatError(ValueError):
    """A journal record's body that does not decode."""


@dataclass(frozen=True, slots=True)
class Delivery:
    group: str
    source: str
    queue_id: int
    topic: str
    fifo: bool
    queue_offset: int
    delivery_attempt: int
    sequence: int
    pop_time_ms: int
    invisible_ms: int
    incarnation: str
    suspended: bool

    def encode(self) -> list[object]:
        return [
            self.group,
            self.source,
            self.queue_id,
            self.topic,
            int(self.fifo),
            self.queue_offset,
            self.delivery_attempt,
            self.sequence,
            self.pop_time_ms,
            self.invisible_ms,
            self.incarnation,
            int(self.suspended),
        ]

    @classmethod
    def decode(cls, item: object) -> Delivery:
        if not isinstance(item, list) or len(item) != 12:
            raise PopJournalFormatError(f"a delivery is an array of 12, not {item!r}")
        g, s, q, t, fifo, o, a, seq, pt, it, inc, susp = item
        return cls(
            _str(g), _str(s), _int(q), _str(t), bool(fifo), _int(o), _int(a), _int(seq), _int(pt), _int(it), _str(inc),
            bool(susp),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Finished:
    group: str
    source: str
    queue_id: int
    queue_offset: int
    committed: int
    acked: bool  # by a consumer's ack (else a revive into the retry topic or the DLQ)

    def encode(self) -> list[object]:
        return [self.group, self.source, self.queue_id, self.queue_offset, self.committed, int(self.acked)]

    @classmethod
    def decode(cls, item: object) -> Finished:
        if not isinstance(item, list) or len(item) not in (5, 6):
            raise PopJournalFormatError(f"a finished offset is an array of 6, not {item!r}")
        acked = bool(item[5]) if len(item) == 6 else True  # written before the flag: acked or revived
        return cls(_str(item[0]), _str(item[1]), _int(item[2]), _int(item[3]), _int(item[4]), acked)


@dataclass(frozen=True, slots=True)
class Reset:
    group: str
    source: str
    queue_id: int
    offset: int


Op = tuple[Delivery, ...] | tuple[Finished, ...] | Reset


@dataclass(frozen=True, slots=True)
class QueueImage:
    group: str
    source: str
    queue_id: int
    committed: int
    finished: tuple[int, ...]
    in_flight: tuple[Delivery, ...]
    redeliver: tuple[Delivery, ...]

    def encode(self) -> list[object]:
        return [
            self.group,
            self.source,
            self.queue_id,
            self.committed,
            list(self.finished),
            [d.encode() for d in self.in_flight],
            [d.encode() for d in self.redeliver],
        ]

    @classmethod
    def decode(cls, item: object) -> QueueImage:
        if not isinstance(item, list) or len(item) != 7:
            raise PopJournalFormatError(f"a queue image is an array of 7, not {item!r}")
        g, s, q, c, done, flying, again = item
        return cls(
            _str(g),
            _str(s),
            _int(q),
            _int(c),
            tuple(_int(o) for o in _list(done)),
            tuple(Delivery.decode(d) for d in _list(flying)),
            tuple(Delivery.decode(d) for d in _list(again)),
        )


@dataclass(frozen=True, slots=True)
class OpsRecord:
    snapshot_offset: int  # NO_SNAPSHOT: none written before it
    ops: tuple[Op, ...]


@dataclass(frozen=True, slots=True)
class SnapshotPart:
    part: int
    parts: int
    sequence: int
    queues: tuple[QueueImage, ...]


def encode_op(op: Op) -> list[object]:
    if isinstance(op, Reset):
        return ["r", op.group, op.source, op.queue_id, op.offset]
    if op and isinstance(op[0], Delivery):
        return ["d", *(d.encode() for d in op)]
    return ["f", *(f.encode() for f in op)]


def encode_ops(record: OpsRecord) -> bytes:
    body = {"v": POP_JOURNAL_VERSION, "sn": record.snapshot_offset, "ops": [encode_op(op) for op in record.ops]}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_snapshot(part: SnapshotPart) -> bytes:
    body = {
        "v": POP_JOURNAL_VERSION,
        "part": part.part,
        "parts": part.parts,
        "seq": part.sequence,
        "qs": [image.encode() for image in part.queues],
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(tag: str, body: bytes) -> OpsRecord | SnapshotPart:
    """The record of a journal message (its TAGS and body); PopJournalFormatError if malformed."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PopJournalFormatError(f"journal body is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("v") != POP_JOURNAL_VERSION:
        raise PopJournalFormatError(f"journal record of an unknown version: {str(doc)[:80]}")
    if tag == TAG_SNAPSHOT:
        return SnapshotPart(
            _int(doc.get("part")),
            _int(doc.get("parts")),
            _int(doc.get("seq")),
            tuple(QueueImage.decode(q) for q in _list(doc.get("qs"))),
        )
    if tag != TAG_OPS:
        raise PopJournalFormatError(f"journal record with tag {tag!r}")
    return OpsRecord(_int(doc.get("sn")), tuple(_decode_op(op) for op in _list(doc.get("ops"))))


def _decode_op(item: object) -> Op:
    if not isinstance(item, list) or not item:
        raise PopJournalFormatError(f"an op is a non-empty array, not {item!r}")
    kind, rest = item[0], item[1:]
    if kind == "d":
        return tuple(Delivery.decode(d) for d in rest)
    if kind == "f":
        return tuple(Finished.decode(f) for f in rest)
    if kind == "r" and len(rest) == 4:
        return Reset(_str(rest[0]), _str(rest[1]), _int(rest[2]), _int(rest[3]))
    raise PopJournalFormatError(f"unknown op {item!r}")


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PopJournalFormatError(f"expected an integer, not {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise PopJournalFormatError(f"expected a string, not {value!r}")
    return value


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise PopJournalFormatError(f"expected an array, not {value!r}")
    return value
