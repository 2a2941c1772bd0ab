"""Timer checkpoint file ``config/timercheck``: 4096 bytes, rest zero.

| offset | size | field | meaning |
|---|---|---|---|
| 0 | 8 | last_read_time_ms | every wheel slot before it is delivered (the dequeue's read pointer) |
| 8 | 8 | last_timer_log_flush_pos | TimerLog bytes below it were fdatasync'ed |
| 16 | 8 | last_timer_queue_offset | next ``rmq_sys_wheel_timer`` queue offset to enqueue |
| 24 | 8 | master_timer_queue_offset | RocketMQ's master copy of the above (equal here) |
| 32 | 8 | state_version | dataVersion.stateVersion (0) |
| 40 | 8 | timestamp_ms | dataVersion.timestamp: when the checkpoint was written |
| 48 | 8 | counter | dataVersion.counter: checkpoints written |

read(8) + flush_pos(8) + queue_offset(8) + master_offset(8) + state_version(8) +
timestamp(8) + counter(8) = 56 bytes, RocketMQ 5's ``TimerCheckpoint``. pyrmq adds a check
block after them (Java never reads past byte 56):

| offset | size | field | meaning |
|---|---|---|---|
| 56 | 4 | ext_magic | 0x50524D54 ("PRMT"): the block is present |
| 60 | 4 | ext_crc | crc32 of bytes 0..55 |

magic(4) + crc(4) = 8 bytes. A checkpoint whose block is missing or wrong is not trusted:
recovery then starts from nothing (rescans the whole TimerLog, re-derives the queue offset
from its last unit, re-reads slots from 12 days back); per-unit states keep that from
delivering anything twice.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from services.domain.format.buffer import Buffer

TIMER_CHECK = struct.Struct(">qqqqqqq")
TIMER_CHECK_FILE_SIZE_BYTES = 4096
assert TIMER_CHECK.size == 56
EXT = struct.Struct(">II")  # ext_magic(4) ext_crc(4)
EXT_MAGIC = 0x50524D54  # "PRMT"
assert EXT.size == 8


@dataclass(slots=True)
class TimerCheck:
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0
    valid: bool = False  # decoded with a good check block (never written)


def encode_timer_check(check: TimerCheck) -> bytes:
    head = TIMER_CHECK.pack(
        check.last_read_time_ms,
        check.last_timer_log_flush_pos,
        check.last_timer_queue_offset,
        check.master_timer_queue_offset,
        check.state_version,
        check.timestamp_ms,
        check.counter,
    )
    body = head + EXT.pack(EXT_MAGIC, zlib.crc32(head))
    return body + bytes(TIMER_CHECK_FILE_SIZE_BYTES - len(body))


def decode_timer_check(buf: Buffer) -> TimerCheck:
    """The checkpoint; ``valid`` is False (and every field 0) unless magic and crc hold."""
    if len(buf) < TIMER_CHECK.size + EXT.size:
        return TimerCheck()
    magic, crc = EXT.unpack_from(buf, TIMER_CHECK.size)
    if magic != EXT_MAGIC or zlib.crc32(bytes(buf[: TIMER_CHECK.size])) != crc:
        return TimerCheck()
    read_ms, flush_pos, queue_offset, master_offset, version, timestamp_ms, counter = TIMER_CHECK.unpack_from(buf, 0)
    return TimerCheck(read_ms, flush_pos, queue_offset, master_offset, version, timestamp_ms, counter, valid=True)
