"""The lite index's keys and values (pyrmq's own format: RocketMQ keeps an LMQ's units in a
ConsumeQueue file or in RocksDB; see services/store/README.md, "Lite topics"). Big-endian, so
keys sort by LMQ name, then offset. Byte layouts only: the store's ``lite_index`` owns the files.

Unit (``units`` table), one per lite message, as a ConsumeQueue unit plus its store time:

| piece | bytes | meaning |
|---|---|---|
| key: lmq | UTF-8 | ``%LMQ%$parent$lite`` |
| key: 0x00 | 1 | separator (never in a topic name) |
| key: queue offset | 8 | the message's offset in the LMQ |
| value: phy_offset | 8 | CommitLog offset of the record |
| value: size | 4 | record size |
| value: tags code | 8 | hash of TAGS (as in a ConsumeQueue unit) |
| value: store timestamp | 8 | ms |

Queue (``queues`` table), one per lite topic:

| piece | bytes | meaning |
|---|---|---|
| key: lmq | UTF-8 | ``%LMQ%$parent$lite`` |
| value: min offset | 8 | its first unit still held |
| value: max offset | 8 | one past its last unit |
| value: last store timestamp | 8 | ms, of its newest message (what expiry goes by) |

Meta (``meta`` table): ``dispatched`` -> 8 bytes, the CommitLog offset everything before which
is indexed (written in the same transaction as the units it covers).
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
