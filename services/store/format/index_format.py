"""IndexFile (``index/{yyyyMMddHHmmssSSS}``): a hash index from ``topic#key`` to phy offsets.

A file is a 40-byte header, ``hash_slot_num`` 4-byte slots, then ``index_num`` 20-byte
entries; big-endian, signed.

Header (40 bytes, at 0):

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 8 | begin_timestamp | store time of the first entry (pre-set to the previous file's end) |
| 8 | 8 | end_timestamp | store time of the newest entry |
| 16 | 8 | begin_phy_offset | phy offset of the first entry (pre-set like begin_timestamp) |
| 24 | 8 | end_phy_offset | phy offset of the newest entry |
| 32 | 4 | hash_slot_count | slots that became non-empty |
| 36 | 4 | index_count | entries + 1 (0 in a fresh file; a reader treats <= 0 as 1) |

begin_timestamp(8) + end_timestamp(8) + begin_phy_offset(8) + end_phy_offset(8)
+ hash_slot_count(4) + index_count(4) = 40 bytes.

Slot ``s`` (4 bytes, at ``40 + s*4``): index of the newest entry whose key hash is ``s``
modulo ``hash_slot_num``; 0 = empty.

Entry ``i`` (20 bytes, at ``40 + hash_slot_num*4 + i*20``, i >= 1; **entry 0 is never used**):

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 4 | key_hash | ``abs(JavaHash(topic + "#" + key))``, Integer.MIN_VALUE -> 0 |
| 4 | 8 | phy_offset | CommitLog offset of the record |
| 12 | 4 | time_diff | seconds since the header's begin_timestamp, clamped to [0, 2^31-1] |
| 16 | 4 | prev_index | previous entry of the same slot (a chain, newest first); 0 ends it |

key_hash(4) + phy_offset(8) + time_diff(4) + prev_index(4) = 20 bytes.

Default size: 40 + 5,000,000*4 + 20,000,000*20 = 420,000,040 bytes. RocketMQ computes sizes
and positions in Java ``int``, so a file may be at most 2^31-1 bytes.
"""
from __future__ import annotations

import operator
import struct
import sys
from array import array
from dataclasses import dataclass

from services.store.format.java_compat import java_string_hash

INDEX_HEADER = struct.Struct(
    ">"
    "q"  # begin_timestamp
    "q"  # end_timestamp
    "q"  # begin_phy_offset
    "q"  # end_phy_offset
    "i"  # hash_slot_count
    "i"  # index_count
)
INDEX_SLOT = struct.Struct(">i")  # newest entry index of the slot (4)
INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # key_hash
    "q"  # phy_offset
    "i"  # time_diff, seconds
    "i"  # prev_index
)
INDEX_HEADER_SIZE_BYTES = 40
INDEX_SLOT_SIZE_BYTES = 4
INDEX_ENTRY_SIZE_BYTES = 20
assert INDEX_HEADER.size == INDEX_HEADER_SIZE_BYTES
assert INDEX_SLOT.size == INDEX_SLOT_SIZE_BYTES
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE_BYTES

# Field positions, from the layouts (not literals).
BEGIN_TIMESTAMP_POS = 0
END_TIMESTAMP_POS = struct.calcsize(">q")
BEGIN_PHY_OFFSET_POS = struct.calcsize(">qq")
END_PHY_OFFSET_POS = struct.calcsize(">qqq")
HASH_SLOT_COUNT_POS = struct.calcsize(">qqqq")
INDEX_COUNT_POS = struct.calcsize(">qqqqi")
assert (END_TIMESTAMP_POS, BEGIN_PHY_OFFSET_POS, END_PHY_OFFSET_POS) == (8, 16, 24)
assert (HASH_SLOT_COUNT_POS, INDEX_COUNT_POS) == (32, 36)
ENTRY_PHY_OFFSET_POS = struct.calcsize(">i")
ENTRY_TIME_DIFF_POS = struct.calcsize(">iq")
ENTRY_PREV_INDEX_POS = struct.calcsize(">iqi")
assert (ENTRY_PHY_OFFSET_POS, ENTRY_TIME_DIFF_POS, ENTRY_PREV_INDEX_POS) == (4, 12, 16)

HASH_SLOT_NUM_DEFAULT = 5_000_000  # maxHashSlotNum
INDEX_NUM_DEFAULT = 20_000_000  # maxIndexNum
INDEX_FILE_NAME_LENGTH = 17  # yyyyMMddHHmmssSSS
INVALID_INDEX = 0  # an empty slot / the end of a chain
JAVA_INT_MAX = 0x7FFFFFFF
JAVA_INT_MIN = -0x80000000


def index_file_size_bytes(hash_slot_num: int, index_num: int) -> int:
    """Size of a file of ``hash_slot_num`` slots and ``index_num`` entries (entry 0 included)."""
    return (INDEX_HEADER_SIZE_BYTES + hash_slot_num * INDEX_SLOT_SIZE_BYTES
            + index_num * INDEX_ENTRY_SIZE_BYTES)


assert index_file_size_bytes(HASH_SLOT_NUM_DEFAULT, INDEX_NUM_DEFAULT) == 420_000_040


def slot_position(hash_slot_num: int, key_hash: int) -> int:
    """Byte position of the slot of ``key_hash`` (a non-negative index key hash)."""
    return INDEX_HEADER_SIZE_BYTES + (key_hash % hash_slot_num) * INDEX_SLOT_SIZE_BYTES


def entry_position(hash_slot_num: int, index: int) -> int:
    """Byte position of entry ``index`` (>= 1 for real entries)."""
    return (INDEX_HEADER_SIZE_BYTES + hash_slot_num * INDEX_SLOT_SIZE_BYTES
            + index * INDEX_ENTRY_SIZE_BYTES)


@dataclass(slots=True)
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 0


def encode_header(header: IndexHeader) -> bytes:
    return INDEX_HEADER.pack(header.begin_timestamp, header.end_timestamp, header.begin_phy_offset,
                             header.end_phy_offset, header.hash_slot_count, header.index_count)


def decode_header(buf, pos: int = 0) -> IndexHeader:
    """The header as stored (``index_count`` is *not* corrected to >= 1 here)."""
    return IndexHeader(*INDEX_HEADER.unpack_from(buf, pos))


def encode_entry(key_hash: int, phy_offset: int, time_diff: int, prev_index: int) -> bytes:
    return INDEX_ENTRY.pack(key_hash, phy_offset, time_diff, prev_index)


def decode_entry(buf, pos: int) -> tuple[int, int, int, int]:
    """(key_hash, phy_offset, time_diff, prev_index) at byte ``pos``."""
    return INDEX_ENTRY.unpack_from(buf, pos)


def index_key(topic: str, key: str) -> str:
    """RocketMQ's ``buildKey``: the string that is hashed."""
    return topic + "#" + key


def index_key_hash(key: str) -> int:
    """``indexKeyHashMethod``: ``Math.abs(key.hashCode())``, and Integer.MIN_VALUE (whose
    ``abs`` stays negative in Java) becomes 0."""
    h = java_string_hash(key)
    return 0 if h == JAVA_INT_MIN else abs(h)


def time_diff_seconds(store_timestamp_ms: int, begin_timestamp_ms: int) -> int:
    """The entry's time_diff: 0 while the header has no begin time, else whole seconds since it
    (Java division truncates toward zero; negatives clamp to 0 either way), at most 2^31-1."""
    if begin_timestamp_ms <= 0:
        return 0
    diff_ms = store_timestamp_ms - begin_timestamp_ms
    if diff_ms < 0:
        return 0
    return min(diff_ms // 1000, JAVA_INT_MAX)


# -- fast hashing for the dispatch hot path ------------------------------------------------
# JavaHash(a + b) = JavaHash(a) * 31^len16(b) + JavaHash(b)  (mod 2^32), so the hash of
# ``topic#`` is computed once per topic and each key is hashed on its own. A key is hashed by
# a dot product with precomputed powers of 31 (``sum(map(mul, ...))`` runs in C), about twice
# as fast as the per-character loop of ``java_string_hash``.

_U32 = 0xFFFFFFFF
_CHUNK_UNITS = 256
_POW31 = [pow(31, i, 1 << 32) for i in range(_CHUNK_UNITS + 1)]  # 31^i mod 2^32
# _POW31_DESC[n] = [31^(n-1), ..., 31^0]: the weights of n units, first unit first.
_POW31_DESC = [_POW31[n - 1::-1] if n else [] for n in range(_CHUNK_UNITS + 1)]
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_mul = operator.mul


def java_hash_extend_u32(prefix_hash_u32: int, text: str) -> int:
    """Unsigned Java hash of ``prefix + text`` from the unsigned Java hash of ``prefix``."""
    units = text.encode("ascii") if text.isascii() else array("H", text.encode(_UTF16))
    n = len(units)
    if n <= _CHUNK_UNITS:
        return (prefix_hash_u32 * _POW31[n] + sum(map(_mul, units, _POW31_DESC[n]))) & _U32
    h = prefix_hash_u32
    for start in range(0, n, _CHUNK_UNITS):
        chunk = units[start:start + _CHUNK_UNITS]
        size = len(chunk)
        h = (h * _POW31[size] + sum(map(_mul, chunk, _POW31_DESC[size]))) & _U32
    return h


def index_key_hash_from_u32(hash_u32: int) -> int:
    """``index_key_hash`` of a string whose unsigned Java hash is ``hash_u32``."""
    if hash_u32 < 0x80000000:
        return hash_u32
    return 0 if hash_u32 == 0x80000000 else 0x100000000 - hash_u32
