"""The lite index's keys and values (pyrmq's own format: RocketMQ keeps an LMQ's units in a
ConsumeQueue file or in RocksDB; see services/store/README.md, "Lite topics"). Big-endian, so
keys sort by LMQ name, then offset. Byte layouts only: the store's ``lite_index`` owns the files.

Unit (``units`` table), one per lite message, as a ConsumeQueue unit plus its store time
(``n``: the LMQ name's UTF-8 length):

| offset | bytes | field |
|---|---|---|
| key 0 | n | lmq: ``%LMQ%$parent$lite``, UTF-8 |
| key n | 1 | 0x00, a separator (never in a topic name) |
| key n + 1 | 8 | queue offset: the message's offset in the LMQ |
| value 0 | 8 | phy_offset: CommitLog offset of the record |
| value 8 | 4 | size: record size |
| value 12 | 8 | tags code: hash of TAGS (as in a ConsumeQueue unit) |
| value 20 | 8 | store timestamp, ms |

Queue (``queues`` table), one per lite topic:

| offset | bytes | field |
|---|---|---|
| key 0 | n | lmq, UTF-8 |
| value 0 | 8 | min offset: its first unit still held |
| value 8 | 8 | max offset: one past its last unit |
| value 16 | 8 | last store timestamp, ms, of its newest message (what expiry goes by) |

Meta (``meta`` table): ``dispatched`` -> 8 bytes, the CommitLog offset everything before which
is indexed (written in the same transaction as the units it covers); per LITE parent, its
number of lite topics (kept with the queues table in the same transactions), and a marker that
the counts exist (an index from before them is counted once when opened):

| offset | bytes | field |
|---|---|---|
| key 0 | 6 | ``count`` + 0x00 |
| key 6 | p | parent topic, UTF-8 |
| value 0 | 8 | lite topics of the parent |
"""

from __future__ import annotations

import struct

SEPARATOR = b"\x00"
_OFFSET = struct.Struct(">q")
_UNIT = struct.Struct(">qiqq")
_QUEUE = struct.Struct(">qqq")
UNIT_VALUE_SIZE = _UNIT.size  # 28
QUEUE_VALUE_SIZE = _QUEUE.size  # 24
DISPATCHED_KEY = b"dispatched"
COUNTS_KEY = b"parent_counts"  # present once the per-parent counts are kept
_COUNT_PREFIX = b"count" + SEPARATOR
_LMQ_PREFIX = b"%LMQ%$"


def count_key(parent: bytes) -> bytes:
    return _COUNT_PREFIX + parent


def lmq_parent(lmq: bytes) -> bytes:
    """The parent topic of a lite LMQ name (``%LMQ%$parent$lite``; a lite topic has no ``$``)."""
    return lmq[len(_LMQ_PREFIX) : lmq.rindex(b"$")]


def unit_key(lmq: bytes, queue_offset: int) -> bytes:
    return lmq + SEPARATOR + _OFFSET.pack(queue_offset)


def unit_prefix(lmq: bytes) -> bytes:
    return lmq + SEPARATOR


def unit_key_offset(key: bytes) -> int:
    return _OFFSET.unpack_from(key, len(key) - 8)[0]


def unit_key_lmq(key: bytes) -> bytes:
    return key[:-9]


def pack_unit(phy_offset: int, size: int, tags_code: int, store_timestamp_ms: int) -> bytes:
    return _UNIT.pack(phy_offset, size, tags_code, store_timestamp_ms)


def unpack_unit(value: bytes) -> tuple[int, int, int, int]:
    """(phy_offset, size, tags code, store timestamp ms)."""
    return _UNIT.unpack(value)


def pack_queue(min_offset: int, max_offset: int, last_store_timestamp_ms: int) -> bytes:
    return _QUEUE.pack(min_offset, max_offset, last_store_timestamp_ms)


def unpack_queue(value: bytes) -> tuple[int, int, int]:
    """(min offset, max offset, last store timestamp ms)."""
    return _QUEUE.unpack(value)


def pack_offset(value: int) -> bytes:
    return _OFFSET.pack(value)


def unpack_offset(value: bytes) -> int:
    return _OFFSET.unpack(value)[0]
