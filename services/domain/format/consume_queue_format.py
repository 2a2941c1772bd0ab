"""ConsumeQueue unit: 20 bytes at byte position ``queue_offset * 20``.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 8 | commitlog_offset | phy_offset of the record |
| 8 | 4 | size | TOTALSIZE of the record |
| 12 | 8 | tags_code | JavaHash(TAGS) sign-extended; deliver time on SCHEDULE_TOPIC_XXXX |

phy_offset(8) + size(4) + tags_code(8) = 20 bytes. A file holds 300,000 units (6,000,000
bytes) and is named by the byte offset of its first unit. The blank unit
``(0, 0x7FFFFFFF, 0)`` fills slots before the first unit of a queue that starts past 0.
A unit is valid iff ``phy_offset >= 0 and size > 0``; an all-zero unit ends the queue.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from services.domain.format.buffer import Buffer

CQ_UNIT = struct.Struct(">qiq")  # commitlog_offset(8) size(4) tags_code(8)
CQ_UNIT_SIZE_BYTES = 20
assert CQ_UNIT.size == CQ_UNIT_SIZE_BYTES
CQ_UNITS_PER_FILE = 300_000
CQ_FILE_SIZE_BYTES = CQ_UNITS_PER_FILE * CQ_UNIT_SIZE_BYTES
BLANK_UNIT = (0, 0x7FFFFFFF, 0)
BLANK_UNIT_BYTES = CQ_UNIT.pack(*BLANK_UNIT)

CQ_DTYPE = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_DTYPE.itemsize == CQ_UNIT_SIZE_BYTES


def encode_unit(phy_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(phy_offset, size, tags_code)


def decode_unit(buf: Buffer, pos: int) -> tuple[int, int, int]:
    return CQ_UNIT.unpack_from(buf, pos)


def encode_units(phy_offsets: Sequence[int], sizes: Sequence[int], tags_codes: Sequence[int]) -> bytes:
    """Many units at once (numpy), for batched dispatch and rebuilds."""
    units = np.empty(len(phy_offsets), dtype=CQ_DTYPE)
    units["phy_offset"] = phy_offsets
    units["size"] = sizes
    units["tags_code"] = tags_codes
    return units.tobytes()


def decode_units(buf: Buffer) -> np.ndarray:
    """View ``buf`` (a multiple of 20 bytes) as a structured array of units."""
    return np.frombuffer(buf, dtype=CQ_DTYPE)


def valid_prefix_length(units: np.ndarray) -> int:
    """Number of leading valid units (phy_offset >= 0 and size > 0)."""
    bad = np.flatnonzero((units["phy_offset"] < 0) | (units["size"] <= 0))
    return int(bad[0]) if len(bad) else len(units)
