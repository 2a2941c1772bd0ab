"""Java behaviours the on-disk formats depend on.

* ``java_string_hash``: ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units,
  wrapping at 32 bits, returned as a *signed* int (Java ``int``).
* ``java_hashmap_order``: the iteration order of a ``java.util.HashMap`` built with a given
  initial capacity (RocketMQ writes message properties in this order, so byte-equal records
  need it).
"""

from __future__ import annotations

import functools
import sys
from array import array

_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


@functools.lru_cache(maxsize=65536)
def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` of ``text`` as a signed 32-bit int."""
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        for unit in array("H", text.encode(_UTF16)):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


REPEATED_HASHES: dict[str, int] = {}
REPEATED_HASHES_MAX = 65_536


def java_string_hash_repeated(text: str) -> int:
    """:func:`java_string_hash` memoised, for values that repeat (tags, message groups); unique
    values (keys, ids) would only churn the memo, so they use the plain function."""
    h = REPEATED_HASHES.get(text)
    if h is None:
        if len(REPEATED_HASHES) >= REPEATED_HASHES_MAX:
            REPEATED_HASHES.clear()
        h = REPEATED_HASHES[text] = java_string_hash(text)
    return h


def _table_size(initial_capacity: int, entry_count: int) -> int:
    """Bucket count of a HashMap after ``entry_count`` puts (power of two, doubles past 0.75)."""
    n = 1
    while n < max(initial_capacity, 1):
        n <<= 1
    while entry_count > n * 0.75:
        n <<= 1
    return n


def java_hashmap_order(keys: list[str], initial_capacity: int = 128) -> list[str]:
    """Keys in the iteration order of a HashMap into which they were put in ``keys`` order.

    Stable sort by bucket ``(h ^ (h >>> 16)) & (n - 1)``: within one bucket, insertion order is
    kept (true while buckets hold < 8 entries, i.e. are lists, not trees).
    """
    mask = _table_size(initial_capacity, len(keys)) - 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return sorted(keys, key=bucket)
