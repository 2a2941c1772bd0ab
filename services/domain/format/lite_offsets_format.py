"""The lite consumer offsets' keys and values (pyrmq's own format; RocketMQ keeps LMQ offsets in
its RocksDB consumer offset store): one LMDB table ``offsets`` under ``<store root>/config/liteOffsets``,
a consumer group's committed next offset in each lite topic it consumed (its LMQ's queue 0).
Big-endian, so keys sort by group, then LMQ name. Byte layouts only: the store's
``lite_consumer_offsets`` owns the files.

| offset | bytes | field |
|---|---|---|
| key 0 | g | group name, UTF-8 |
| key g | 1 | 0x00, a separator (never in a group or topic name) |
| key g + 1 | n | lmq: ``%LMQ%$parent$lite``, UTF-8 |
| value 0 | 8 | the group's next offset to consume in the lite topic |
"""

from __future__ import annotations

import struct

SEPARATOR = b"\x00"
_OFFSET = struct.Struct(">q")


def offset_key(group: str, lmq: str) -> bytes:
    return group.encode("utf-8") + SEPARATOR + lmq.encode("utf-8")


def group_prefix(group: str) -> bytes:
    return group.encode("utf-8") + SEPARATOR


def split_key(key: bytes) -> tuple[str, str]:
    """(group, lmq) of a key."""
    group, _, lmq = bytes(key).partition(SEPARATOR)
    return group.decode("utf-8"), lmq.decode("utf-8")


def pack_offset(offset: int) -> bytes:
    return _OFFSET.pack(offset)


def unpack_offset(value: bytes) -> int:
    return _OFFSET.unpack(value)[0]
