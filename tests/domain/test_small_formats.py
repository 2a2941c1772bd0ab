"""Golden bytes for the checkpoint and ConsumeQueue formats."""

from __future__ import annotations

import numpy as np

from services.domain.format.checkpoint_format import (
    CHECKPOINT_FILE_SIZE_BYTES,
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
)
from services.domain.format.consume_queue_format import (
    BLANK_UNIT_BYTES,
    CQ_DTYPE,
    decode_unit,
    decode_units,
    encode_unit,
    encode_units,
    valid_prefix_length,
)


def test_checkpoint_golden_bytes():
    cp = Checkpoint(
        physic_msg_timestamp=1700000000123,
        logics_msg_timestamp=1700000000100,
        index_msg_timestamp=1699999999000,
        master_flushed_offset=0,
        confirm_phy_offset=4096,
        dispatched_phy_offset=8192,
        flushed_phy_offset=12288,
        cq_max_offset_sum=42,
    )
    data = encode_checkpoint(cp)
    assert len(data) == CHECKPOINT_FILE_SIZE_BYTES
    # RocketMQ's 40 bytes: five big-endian longs.
    assert data[:40].hex() == ("0000018bcfe5687b0000018bcfe568640000018bcfe5641800000000000000000000000000001000")
    # pyrmq's block: "PRMQ", version 1, dispatched, flushed, queue-offset sum, crc32.
    assert data[40:72].hex() == ("50524d510000000100000000000020000000000000003000000000000000002a")
    assert data[76:] == bytes(CHECKPOINT_FILE_SIZE_BYTES - 76)
    assert decode_checkpoint(data) == cp
    assert cp.min_timestamp() == 1700000000100 - 3000


def test_checkpoint_block_with_bad_crc_is_ignored():
    data = bytearray(encode_checkpoint(Checkpoint(dispatched_phy_offset=5, flushed_phy_offset=6)))
    data[50] ^= 1
    cp = decode_checkpoint(bytes(data))
    assert cp.dispatched_phy_offset == -1 and cp.flushed_phy_offset == -1
    # A RocketMQ-written file (only 40 bytes used) reads as "no pyrmq block".
    java = encode_checkpoint(Checkpoint(physic_msg_timestamp=7))[:40] + bytes(4056)
    assert decode_checkpoint(java) == Checkpoint(physic_msg_timestamp=7)


def test_consume_queue_units_golden_and_vectorised():
    assert encode_unit(0x1122334455, 210, -1).hex() == "0000001122334455000000d2ffffffffffffffff"
    assert BLANK_UNIT_BYTES.hex() == "00000000000000007fffffff0000000000000000"
    many = encode_units([0, 210, 420], [210, 210, 99], [2598919, 0, -5])
    assert many[:20] == encode_unit(0, 210, 2598919) and many[40:] == encode_unit(420, 99, -5)
    units = decode_units(many + bytes(20))
    assert units.dtype == CQ_DTYPE and decode_unit(many, 20) == (210, 210, 0)
    assert valid_prefix_length(units) == 3
    assert valid_prefix_length(np.frombuffer(BLANK_UNIT_BYTES * 2, dtype=CQ_DTYPE)) == 2
