"""TimerLog unit: 52 bytes, appended to ``timerlog/{20-digit start offset}`` segments.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | size | always 52 |
| 4 | 8 | prev_pos | TimerLog offset of the previous unit of the same wheel slot; -1: none |
| 12 | 4 | magic | 1 default, \\| 2 ROLL, \\| 4 DELETE; valid iff ``(magic \\| 0xF) == 0xF`` |
| 16 | 8 | write_time_ms | the wheel's write time when the unit was appended (RocketMQ currWriteTimeMs) |
| 24 | 4 | delay_ms | ``delayed_ms - write_time_ms``: the unit's slot time is ``delayed_ms`` floored |
| 28 | 8 | offset_py | CommitLog offset of the message in ``rmq_sys_wheel_timer`` |
| 36 | 4 | size_py | that record's total size |
| 40 | 4 | topic_hash | JavaHash(REAL_TOPIC), for metrics |
| 44 | 4 | crc | pyrmq: crc32 of bytes 0..43 (RocketMQ: first half of "reserved", 0) |
| 48 | 4 | state | pyrmq: 0 pending, 1 delivering, 2 done (RocketMQ: second half of "reserved", 0) |

size(4) + prev_pos(8) + magic(4) + write_time(8) + delay(4) + offset_py(8) + size_py(4) +
topic_hash(4) + crc(4) + state(4) = 52 bytes, RocketMQ 5's ``TimerLog.UNIT_SIZE``. RocketMQ
writes the last 8 bytes as a reserved 0 and never reads them; pyrmq uses them for a unit CRC
(torn units after a power loss fail it) and the dequeue state (rewritten in place, so a crash
never re-delivers a unit marked done; "delivering" units are re-delivered and counted as
possible duplicates). pyrmq's ``delayed_ms`` of a normal unit is the exact delivery time minus
1 ms, so its floor is the slot of the rounded ``TIMER_OUT_MS`` (the delivery time rounded down to
the precision, one tick earlier when it falls on a tick: ``contracts.delay.timer_out_ms``).

End of a segment: when fewer than ``52 + 16`` bytes remain, a 16-byte blank is written and
the unit goes to the next segment:

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | remaining | bytes left in the segment from here |
| 4 | 8 | zero | 0 |
| 12 | 4 | blank_magic | 0xCBD43194 (-875286124), the CommitLog's blank magic |

remaining(4) + zero(8) + blank_magic(4) = 16 bytes.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

from services.domain.format.buffer import Buffer

UNIT = struct.Struct(">iqiqiqiiIi")  # size prev_pos magic write_time delay offset_py size_py topic_hash crc state
UNIT_SIZE_BYTES = 52
assert UNIT.size == UNIT_SIZE_BYTES
HEAD = struct.Struct(">iqiqiqii")  # the bytes the crc covers
TAIL = struct.Struct(">Ii")  # crc(4) state(4)
CRC_OFFSET = 44
STATE_OFFSET = 48
assert HEAD.size == CRC_OFFSET and HEAD.size + TAIL.size == UNIT_SIZE_BYTES
STATE = struct.Struct(">i")
BLANK = struct.Struct(">iqi")  # remaining(4) zero(8) blank_magic(4)
BLANK_SIZE_BYTES = 16
assert BLANK.size == BLANK_SIZE_BYTES
BLANK_MAGIC = -875286124  # 0xCBD43194 as a Java int
assert BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194

MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4

STATE_PENDING = 0
STATE_DELIVERING = 1
STATE_DONE = 2
_STATES = (STATE_PENDING, STATE_DELIVERING, STATE_DONE)

NO_POS = -1

# The same layout for numpy scans (segment cleanup, recovery statistics).
UNIT_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("prev_pos", ">i8"),
        ("magic", ">i4"),
        ("write_time_ms", ">i8"),
        ("delay_ms", ">i4"),
        ("offset_py", ">i8"),
        ("size_py", ">i4"),
        ("topic_hash", ">i4"),
        ("crc", ">u4"),
        ("state", ">i4"),
    ]
)
assert UNIT_DTYPE.itemsize == UNIT_SIZE_BYTES


class TimerUnit(NamedTuple):
    prev_pos: int
    magic: int
    write_time_ms: int
    delay_ms: int
    offset_py: int
    size_py: int
    topic_hash: int = 0
    state: int = STATE_PENDING

    @property
    def delayed_ms(self) -> int:
        return self.write_time_ms + self.delay_ms

    @property
    def is_delete(self) -> bool:
        return bool(self.magic & MAGIC_DELETE)

    @property
    def is_roll(self) -> bool:
        return bool(self.magic & MAGIC_ROLL)


class CorruptUnit(ValueError):
    """The bytes at a position are not a valid unit (torn, zero, or never written)."""


def magic_ok(magic: int) -> bool:
    """RocketMQ's ``isMagicOK``: only the low four flag bits may be set."""
    return (magic | 0xF) == 0xF


def encode_unit(unit: TimerUnit) -> bytes:
    assert magic_ok(unit.magic) and unit.magic and unit.state in _STATES
    head = HEAD.pack(
        UNIT_SIZE_BYTES,
        unit.prev_pos,
        unit.magic,
        unit.write_time_ms,
        unit.delay_ms,
        unit.offset_py,
        unit.size_py,
        unit.topic_hash,
    )
    return head + TAIL.pack(zlib.crc32(head), unit.state)


def decode_unit(buf: Buffer, pos: int = 0) -> TimerUnit:
    """The unit at ``buf[pos:pos+52]``; CorruptUnit if size, magic or crc is wrong."""
    if len(buf) - pos < UNIT_SIZE_BYTES:
        raise CorruptUnit(f"short unit at {pos}")
    size, prev_pos, magic, write_time, delay, offset_py, size_py, topic_hash, crc, state = UNIT.unpack_from(buf, pos)
    if size != UNIT_SIZE_BYTES or not magic_ok(magic) or magic == 0:
        raise CorruptUnit(f"bad size {size} or magic {magic} at {pos}")
    if zlib.crc32(bytes(buf[pos : pos + CRC_OFFSET])) != crc:
        raise CorruptUnit(f"crc mismatch at {pos}")
    if state not in _STATES:
        raise CorruptUnit(f"bad state {state} at {pos}")
    return TimerUnit(prev_pos, magic, write_time, delay, offset_py, size_py, topic_hash, state)


def encode_state(state: int) -> bytes:
    assert state in _STATES
    return STATE.pack(state)


def encode_blank(remaining: int) -> bytes:
    return BLANK.pack(remaining, 0, BLANK_MAGIC)


def is_blank(buf: Buffer, pos: int = 0) -> bool:
    """Whether a blank (end-of-segment filler) starts at ``pos``."""
    if len(buf) - pos < BLANK_SIZE_BYTES:
        return False
    return bool(BLANK.unpack_from(buf, pos)[2] == BLANK_MAGIC)


def unit_fits(position: int, segment_size_bytes: int) -> bool:
    """Whether a unit may start at ``position`` of a segment (RocketMQ keeps room for a blank)."""
    return position + UNIT_SIZE_BYTES + BLANK_SIZE_BYTES <= segment_size_bytes
