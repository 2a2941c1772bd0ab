"""StoreCheckpoint file ``checkpoint``: 4096 bytes, rest zero.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 8 | physic_msg_timestamp | store time of the last message flushed in the CommitLog |
| 8 | 8 | logics_msg_timestamp | store time of the last message written to a ConsumeQueue |
| 16 | 8 | index_msg_timestamp | end timestamp of the last full IndexFile |
| 24 | 8 | master_flushed_offset | 5.x |
| 32 | 8 | confirm_phy_offset | 5.x: start of the last valid record at recovery |

physic(8) + logics(8) + index(8) + master_flushed(8) + confirm(8) = 40 bytes used by RocketMQ.

pyrmq adds an offset-based block after them (Java never reads past byte 40):

| offset | size | field | meaning |
|---|---|---|---|
| 40 | 4 | ext_magic | 0x50524D51 ("PRMQ"): the block is present |
| 44 | 4 | ext_version | 1 |
| 48 | 8 | dispatched_phy_offset | every record below it is in the ConsumeQueues and IndexFile on disk |
| 56 | 8 | flushed_phy_offset | every CommitLog byte below it was fdatasync'ed |
| 64 | 8 | cq_max_offset_sum | sum of every ConsumeQueue's max offset when dispatched was taken |
| 72 | 4 | ext_crc | crc32 of bytes 40..71 |

magic(4) + version(4) + dispatched(8) + flushed(8) + cq_sum(8) + crc(4) = 36 bytes.
``cq_max_offset_sum`` only grows (retention moves min offsets, never max ones), so a smaller
sum at recovery means ConsumeQueues were lost: they are rebuilt from the CommitLog. Recovery trusts the
block only when magic, version and crc hold; otherwise it falls back to a full re-dispatch.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from services.domain.format.buffer import Buffer

CHECKPOINT = struct.Struct(">qqqqq")
CHECKPOINT_FILE_SIZE_BYTES = 4096
assert CHECKPOINT.size == 40
EXT = struct.Struct(">IIqqq")  # ext_magic(4) ext_version(4) dispatched(8) flushed(8) cq_sum(8)
EXT_CRC = struct.Struct(">I")
EXT_MAGIC = 0x50524D51  # "PRMQ"
EXT_VERSION = 1
assert EXT.size + EXT_CRC.size == 36


@dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    dispatched_phy_offset: int = -1  # -1: unknown (no valid pyrmq block)
    flushed_phy_offset: int = -1
    cq_max_offset_sum: int = -1

    def min_timestamp(self) -> int:
        """RocketMQ's recovery bound: min(physic, logics) - 3 s, never negative."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)


def encode_checkpoint(cp: Checkpoint) -> bytes:
    head = CHECKPOINT.pack(
        cp.physic_msg_timestamp,
        cp.logics_msg_timestamp,
        cp.index_msg_timestamp,
        cp.master_flushed_offset,
        cp.confirm_phy_offset,
    )
    ext = EXT.pack(EXT_MAGIC, EXT_VERSION, cp.dispatched_phy_offset, cp.flushed_phy_offset, cp.cq_max_offset_sum)
    ext += EXT_CRC.pack(zlib.crc32(ext))
    body = head + ext
    return body + bytes(CHECKPOINT_FILE_SIZE_BYTES - len(body))


def decode_checkpoint(buf: Buffer) -> Checkpoint:
    if len(buf) < CHECKPOINT.size:
        return Checkpoint()
    cp = Checkpoint(*CHECKPOINT.unpack_from(buf, 0))
    end = CHECKPOINT.size + EXT.size
    if len(buf) >= end + EXT_CRC.size:
        magic, version, dispatched, flushed, cq_sum = EXT.unpack_from(buf, CHECKPOINT.size)
        (crc,) = EXT_CRC.unpack_from(buf, end)
        if magic == EXT_MAGIC and version == EXT_VERSION and zlib.crc32(bytes(buf[CHECKPOINT.size : end])) == crc:
            cp.dispatched_phy_offset = dispatched
            cp.flushed_phy_offset = flushed
            cp.cq_max_offset_sum = cq_sum
    return cp
