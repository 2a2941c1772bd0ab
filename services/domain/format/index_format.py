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
import threading
from array import array
from dataclasses import dataclass

import numpy as np

from services.domain.format.buffer import Buffer
from services.domain.format.java_compat import java_string_hash

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
# The entry as a numpy record (packed, big-endian), for writing many at once.
INDEX_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
INDEX_HEADER_SIZE_BYTES = 40
INDEX_SLOT_SIZE_BYTES = 4
INDEX_ENTRY_SIZE_BYTES = 20
assert INDEX_HEADER.size == INDEX_HEADER_SIZE_BYTES
assert INDEX_SLOT.size == INDEX_SLOT_SIZE_BYTES
assert INDEX_ENTRY.size == INDEX_ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE_BYTES

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
    return INDEX_HEADER_SIZE_BYTES + hash_slot_num * INDEX_SLOT_SIZE_BYTES + index_num * INDEX_ENTRY_SIZE_BYTES


assert index_file_size_bytes(HASH_SLOT_NUM_DEFAULT, INDEX_NUM_DEFAULT) == 420_000_040


def slot_position(hash_slot_num: int, key_hash: int) -> int:
    """Byte position of the slot of ``key_hash`` (a non-negative index key hash)."""
    return INDEX_HEADER_SIZE_BYTES + (key_hash % hash_slot_num) * INDEX_SLOT_SIZE_BYTES


def entry_position(hash_slot_num: int, index: int) -> int:
    """Byte position of entry ``index`` (>= 1 for real entries)."""
    return INDEX_HEADER_SIZE_BYTES + hash_slot_num * INDEX_SLOT_SIZE_BYTES + index * INDEX_ENTRY_SIZE_BYTES


@dataclass(slots=True)
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 0


def encode_header(header: IndexHeader) -> bytes:
    return INDEX_HEADER.pack(
        header.begin_timestamp,
        header.end_timestamp,
        header.begin_phy_offset,
        header.end_phy_offset,
        header.hash_slot_count,
        header.index_count,
    )


def decode_header(buf: Buffer, pos: int = 0) -> IndexHeader:
    """The header as stored (``index_count`` is *not* corrected to >= 1 here)."""
    return IndexHeader(*INDEX_HEADER.unpack_from(buf, pos))


def encode_entry(key_hash: int, phy_offset: int, time_diff: int, prev_index: int) -> bytes:
    return INDEX_ENTRY.pack(key_hash, phy_offset, time_diff, prev_index)


def decode_entry(buf: Buffer, pos: int) -> tuple[int, int, int, int]:
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
# ``topic#`` is computed once per topic and each key is hashed on its own.
#
# One ASCII key: write each byte c as 31*q + r (0 <= r < 31); then
#   sum c_i * 31^(n-1-i) = int(R, 31) + 31 * int(Q, 31)
# where R and Q are the strings of the digits r_i and q_i (``bytes.translate`` makes them), so
# ``int()`` evaluates the polynomial in C: ~2.5x faster than a dot product with precomputed
# powers of 31 (``sum(map(mul, ...))``), which stays the path for other keys.
#
# Many keys (``index_key_hashes_of_ranges``, numpy): with G[k] = sum_{j<k} c_j * 31^-j
# (mod 2^32; 31 is odd, so invertible), the hash of the units [a, b) is
# 31^(b-1) * (G[b] - G[a]): one cumsum over all the keys of a batch, in uint32 arithmetic,
# which wraps exactly like Java's int. ~75 ns a key for thousands, a few µs fixed per call.

_U32 = 0xFFFFFFFF
_CHUNK_UNITS = 256
_POW31 = [pow(31, i, 1 << 32) for i in range(_CHUNK_UNITS + 1)]  # 31^i mod 2^32
# _POW31_DESC[n] = [31^(n-1), ..., 31^0]: the weights of n units, first unit first.
_POW31_DESC = [_POW31[n - 1 :: -1] if n else [] for n in range(_CHUNK_UNITS + 1)]
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_mul = operator.mul
_DIGITS31 = b"0123456789abcdefghijklmnopqrstu"
assert len(_DIGITS31) == 31
_R31 = bytes(_DIGITS31[c % 31] for c in range(256))  # byte -> digit of c mod 31
_Q31 = bytes(_DIGITS31[c // 31] for c in range(256))  # byte -> digit of c div 31 (<= 8)
# int() on at most this many digits: far below sys.get_int_max_str_digits()'s floor (640).
_INT_DIGITS_MAX = _CHUNK_UNITS
# For callers that inline the ASCII path of java_hash_extend_u32 (the dispatch loop):
HASH_POW31 = _POW31  # 31^i mod 2^32, i <= HASH_ASCII_UNITS_MAX
HASH_DIGITS_R31 = _R31
HASH_DIGITS_Q31 = _Q31
HASH_ASCII_UNITS_MAX = _INT_DIGITS_MAX


def java_hash_extend_u32(prefix_hash_u32: int, text: str) -> int:
    """Unsigned Java hash of ``prefix + text`` from the unsigned Java hash of ``prefix``."""
    if text.isascii():
        n = len(text)
        if 0 < n <= _INT_DIGITS_MAX:
            digits = text.encode("ascii")
            return (
                prefix_hash_u32 * _POW31[n] + int(digits.translate(_R31), 31) + 31 * int(digits.translate(_Q31), 31)
            ) & _U32
        units: bytes | array[int] = text.encode("ascii")
    else:
        units = array("H", text.encode(_UTF16))
    n = len(units)
    if n <= _CHUNK_UNITS:
        return (prefix_hash_u32 * _POW31[n] + sum(map(_mul, units, _POW31_DESC[n]))) & _U32
    h = prefix_hash_u32
    for start in range(0, n, _CHUNK_UNITS):
        chunk = units[start : start + _CHUNK_UNITS]
        size = len(chunk)
        h = (h * _POW31[size] + sum(map(_mul, chunk, _POW31_DESC[size]))) & _U32
    return h


def index_key_hash_from_u32(hash_u32: int) -> int:
    """``index_key_hash`` of a string whose unsigned Java hash is ``hash_u32``."""
    if hash_u32 < 0x80000000:
        return hash_u32
    return 0 if hash_u32 == 0x80000000 else 0x100000000 - hash_u32


_INV31 = pow(31, -1, 1 << 32)
_np_tables_lock = threading.Lock()
_np_pow31 = np.ones(1, np.uint32)  # 31^i mod 2^32
_np_inv31 = np.ones(1, np.uint32)  # 31^-i mod 2^32


def _np_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    """31^i and 31^-i (mod 2^32) for i < size (at least), grown by doubling, never mutated."""
    global _np_pow31, _np_inv31
    pow31, inv31 = _np_pow31, _np_inv31
    if len(pow31) >= size:
        return pow31, inv31
    with _np_tables_lock:
        if len(_np_pow31) < size:
            n = max(size, 2 * len(_np_pow31), 4096)
            pow31 = np.full(n, 31, np.uint32)
            pow31[0] = 1
            inv31 = np.full(n, _INV31, np.uint32)
            inv31[0] = 1
            # uint32 products wrap mod 2^32, as wanted.
            _np_pow31 = np.multiply.accumulate(pow31, dtype=np.uint32)
            _np_inv31 = np.multiply.accumulate(inv31, dtype=np.uint32)
        return _np_pow31, _np_inv31


def index_key_hashes(prefix_hashes_u32: list[int] | int, keys: list[str]) -> np.ndarray:
    """``index_key_hash(prefix + key)`` for every key, as an int64 array, given the unsigned
    Java hash of each key's prefix (or one for all). Vectorised: worth it from a few dozen keys
    on."""
    count = len(keys)
    joined = "".join(keys)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), np.uint8)
        lengths = np.fromiter(map(len, keys), np.int64, count)
    else:
        units = np.frombuffer(joined.encode(_UTF16), np.uint16)
        lengths = np.fromiter((len(key.encode(_UTF16)) >> 1 for key in keys), np.int64, count)
    starts = np.cumsum(lengths) - lengths
    if isinstance(prefix_hashes_u32, int):
        prefixes = np.full(count, prefix_hashes_u32, np.uint32)
    else:
        prefixes = np.array(prefix_hashes_u32, np.uint32)
    return index_key_hashes_of_ranges(units, starts, lengths, prefixes)


def text_units(text: str) -> np.ndarray:
    """The UTF-16 code units of ``text`` (uint8 when it is ASCII: the same values)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    return np.frombuffer(text.encode(_UTF16), np.uint16)


def index_key_hashes_of_ranges(
    units: np.ndarray, starts: np.ndarray, lengths: np.ndarray, prefixes_u32: np.ndarray
) -> np.ndarray:
    """``index_key_hash(prefix + key)`` (int64) for each key ``units[start:start + length]``
    (UTF-16 code units, ``text_units``), given the unsigned Java hash of its prefix (uint32)."""
    total = len(units)
    pow31, inv31 = _np_tables(total + 1)
    prefix_sums = np.zeros(total + 1, np.uint32)
    np.cumsum(units * inv31[:total], dtype=np.uint32, out=prefix_sums[1:])
    ends = starts + lengths
    hashes = pow31[ends - 1] * (prefix_sums[ends] - prefix_sums[starts])
    hashes += pow31[lengths] * prefixes_u32
    # Math.abs of the signed (Java int) value, which leaves Integer.MIN_VALUE negative: the
    # mask then makes it 0, as index_key_hash does.
    signed = hashes.view(np.int32)
    np.abs(signed, out=signed)
    signed &= 0x7FFFFFFF
    return signed.astype(np.int64)
