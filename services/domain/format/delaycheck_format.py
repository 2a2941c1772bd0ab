"""Delay-level in-flight file ``config/delaycheck`` (pyrmq only): 4096 bytes, rest zero.

Before the scheduler puts a batch of due ``SCHEDULE_TOPIC_XXXX`` messages of one level, it
records the batch's queue offsets here; after the store recorded the level's new delay offset
it clears the entry. A batch still recorded at start-up whose first offset is at or after the
store's delay offset may have been delivered already: its messages are delivered again and
counted as possible duplicates.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | magic | 0x50524D44 ("PRMD") |
| 4 | 4 | version | 1 |
| 8 + 20 (level - 1) | 8 | begin | first queue offset of the batch in flight; -1: none |
| 16 + 20 (level - 1) | 8 | end | queue offset after the batch's last message |
| 24 + 20 (level - 1) | 4 | crc | crc32 of the entry's begin and end |

magic(4) + version(4) = 8 bytes of header, then begin(8) + end(8) + crc(4) = 20 bytes per
level, for levels 1..64. An entry whose crc does not match (torn, or never written) reads as
"none".
"""

from __future__ import annotations

import struct
import zlib

from services.domain.format.buffer import Buffer

HEADER = struct.Struct(">II")  # magic(4) version(4)
ENTRY = struct.Struct(">qqI")  # begin(8) end(8) crc(4)
RANGE = struct.Struct(">qq")
DELAY_CHECK_FILE_SIZE_BYTES = 4096
MAGIC = 0x50524D44  # "PRMD"
VERSION = 1
LEVELS_MAX = 64
assert HEADER.size == 8 and ENTRY.size == 20
assert HEADER.size + LEVELS_MAX * ENTRY.size <= DELAY_CHECK_FILE_SIZE_BYTES
NONE = (-1, -1)


def header_bytes() -> bytes:
    return HEADER.pack(MAGIC, VERSION)


def header_ok(buf: Buffer) -> bool:
    return len(buf) >= HEADER.size and HEADER.unpack_from(buf, 0) == (MAGIC, VERSION)


def entry_position(level: int) -> int:
    assert 1 <= level <= LEVELS_MAX
    return HEADER.size + (level - 1) * ENTRY.size


def encode_entry(begin: int, end: int) -> bytes:
    return ENTRY.pack(begin, end, zlib.crc32(RANGE.pack(begin, end)))


def decode_entry(buf: Buffer, level: int) -> tuple[int, int]:
    """(begin, end) of the level's batch in flight, or NONE."""
    pos = entry_position(level)
    if len(buf) < pos + ENTRY.size:
        return NONE
    begin, end, crc = ENTRY.unpack_from(buf, pos)
    if zlib.crc32(RANGE.pack(begin, end)) != crc or begin < 0 or end < begin:
        return NONE
    return begin, end
