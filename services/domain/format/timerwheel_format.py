"""TimerWheel file ``timerwheel``: ``2 * slots_total`` slots of 32 bytes, nothing else.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 8 | time | the slot's time divided by the precision (``time_ms // precision_ms``) |
| 8 | 8 | first_pos | TimerLog offset of the slot's first unit |
| 16 | 8 | last_pos | TimerLog offset of the slot's last unit: the head of its ``prev_pos`` chain |
| 24 | 4 | num | units added minus DELETE units (RocketMQ's count, for metrics) |
| 28 | 4 | magic | unused, 0 |

time(8) + first_pos(8) + last_pos(8) + num(4) + magic(4) = 32 bytes. The slot of a time ``t``
(ms) is index ``(t // precision_ms) % (2 * slots_total)``, at byte ``index * 32``. A slot holds
data for ``t`` only if its ``time`` field equals ``t // precision_ms`` (the ring is reused
every ``2 * slots_total`` slots). RocketMQ 5's ``TimerWheel``: slots_total = 7 days x 86400 =
604,800, so the file is 1,209,600 x 32 = 38,707,200 bytes; a file of any other non-zero
length is refused.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from services.domain.format.buffer import Buffer

SLOT = struct.Struct(">qqqii")  # time(8) first_pos(8) last_pos(8) num(4) magic(4)
SLOT_SIZE_BYTES = 32
assert SLOT.size == SLOT_SIZE_BYTES
SLOTS_TOTAL_DEFAULT = 7 * 86_400  # TIMER_WHEEL_TTL_DAY * DAY_SECS
WHEEL_FILE_SIZE_BYTES_DEFAULT = 2 * SLOTS_TOTAL_DEFAULT * SLOT_SIZE_BYTES
assert WHEEL_FILE_SIZE_BYTES_DEFAULT == 38_707_200

SLOT_DTYPE = np.dtype([("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"), ("magic", ">i4")])
assert SLOT_DTYPE.itemsize == SLOT_SIZE_BYTES


class Slot(NamedTuple):
    time_ms: int  # the slot's time in ms (time field x precision); -1 for an empty slot
    first_pos: int
    last_pos: int
    num: int = 0
    magic: int = 0


EMPTY_SLOT = Slot(-1, -1, -1, 0, 0)


def wheel_file_size_bytes(slots_total: int) -> int:
    return 2 * slots_total * SLOT_SIZE_BYTES


def slot_index(time_ms: int, precision_ms: int, slots_total: int) -> int:
    return (time_ms // precision_ms) % (2 * slots_total)


def encode_slot(time_ms: int, precision_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> bytes:
    return SLOT.pack(time_ms // precision_ms, first_pos, last_pos, num, magic)


def decode_slot(buf: Buffer, pos: int, time_ms: int, precision_ms: int) -> Slot:
    """The slot at byte ``pos`` as seen for ``time_ms``: EMPTY_SLOT if it holds another time."""
    stored, first_pos, last_pos, num, magic = SLOT.unpack_from(buf, pos)
    if stored != time_ms // precision_ms:
        return EMPTY_SLOT
    return Slot(stored * precision_ms, first_pos, last_pos, num, magic)
