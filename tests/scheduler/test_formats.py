"""Golden bytes and round trips of the scheduler's on-disk formats (RocketMQ 5's timer files:
services/domain/format/timer*_format.py, delaycheck_format.py)."""

from __future__ import annotations

import struct

import pytest

from services.domain.format import delaycheck_format as dc
from services.domain.format.java_compat import java_string_hash
from services.domain.format.timercheck_format import (
    TIMER_CHECK_FILE_SIZE_BYTES,
    TimerCheck,
    decode_timer_check,
    encode_timer_check,
)
from services.domain.format.timerlog_format import (
    BLANK_MAGIC,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    STATE_DONE,
    UNIT_SIZE_BYTES,
    CorruptUnit,
    TimerUnit,
    decode_unit,
    encode_blank,
    encode_unit,
    is_blank,
    magic_ok,
    unit_fits,
)
from services.domain.format.timerwheel_format import (
    EMPTY_SLOT,
    SLOT_SIZE_BYTES,
    WHEEL_FILE_SIZE_BYTES_DEFAULT,
    decode_slot,
    encode_slot,
    slot_index,
)

GOLDEN_UNIT = bytes.fromhex(
    "00000034"  # size 52
    "ffffffffffffffff"  # prev_pos -1
    "00000001"  # magic: default
    "0000018bcfe56800"  # write_time_ms 1700000000000
    "000005dc"  # delay_ms 1500
    "0000000000001000"  # offset_py 4096
    "0000012c"  # size_py 300
    "95a7c512"  # JavaHash("TopicA")
    "5756dd80"  # crc32 of the 44 bytes above (pyrmq)
    "00000000"
)  # state: pending (pyrmq)


def test_timerlog_unit_golden_bytes():
    unit = TimerUnit(-1, MAGIC_DEFAULT, 1_700_000_000_000, 1500, 4096, 300, java_string_hash("TopicA"), 0)
    assert encode_unit(unit) == GOLDEN_UNIT and len(GOLDEN_UNIT) == UNIT_SIZE_BYTES == 52
    decoded = decode_unit(GOLDEN_UNIT)
    assert decoded == unit and decoded.delayed_ms == 1_700_000_001_500
    assert not decoded.is_roll and not decoded.is_delete


def test_timerlog_unit_round_trip_with_flags_and_state():
    unit = TimerUnit(5200, MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE, 1, -7, 2**40, 1, -1, STATE_DONE)
    assert decode_unit(encode_unit(unit)) == unit


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"\x00" * 52,  # never written
        lambda b: struct.pack(">i", 51) + b[4:],  # bad size
        lambda b: b[:12] + struct.pack(">i", 0x10) + b[16:],  # magic with an unknown bit
        lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:],  # a flipped bit (crc)
        lambda b: b[:48] + struct.pack(">i", 7),  # unknown state
        lambda b: b[:40],  # short
    ],
)
def test_damaged_units_are_refused(damage):
    with pytest.raises(CorruptUnit):
        decode_unit(damage(GOLDEN_UNIT))


def test_magic_rule_and_blank():
    assert magic_ok(1) and magic_ok(0xF) and not magic_ok(0x10)
    blank = encode_blank(1000)
    assert blank == bytes.fromhex("000003e80000000000000000cbd43194")
    assert is_blank(blank) and not is_blank(GOLDEN_UNIT) and BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194
    # a unit fits only with room left for a blank after it (TimerLog.append)
    assert unit_fits(0, 68) and not unit_fits(1, 68)


def test_timerwheel_slot_golden_bytes_and_ring():
    raw = encode_slot(1_700_000_001_000, 1000, 0, 104, 2)
    assert raw == bytes.fromhex("000000006553f101000000000000000000000000000000680000000200000000")
    assert len(raw) == SLOT_SIZE_BYTES and WHEEL_FILE_SIZE_BYTES_DEFAULT == 38_707_200
    assert decode_slot(raw, 0, 1_700_000_001_999, 1000).last_pos == 104
    # the same index two windows (14 days) later holds another time: empty for it
    later = 1_700_000_001_000 + 2 * 604_800 * 1000
    assert slot_index(later, 1000, 604_800) == slot_index(1_700_000_001_000, 1000, 604_800)
    assert decode_slot(raw, 0, later, 1000) is EMPTY_SLOT


def test_timercheck_golden_bytes_and_check_block():
    check = TimerCheck(1_700_000_000_000, 5200, 77, 77, 0, 1_700_000_000_500, 3)
    raw = encode_timer_check(check)
    assert len(raw) == TIMER_CHECK_FILE_SIZE_BYTES and raw[64:] == bytes(TIMER_CHECK_FILE_SIZE_BYTES - 64)
    assert raw[:64] == bytes.fromhex(
        "0000018bcfe56800"
        "0000000000001450"
        "000000000000004d"
        "000000000000004d"
        "0000000000000000"
        "0000018bcfe569f4"
        "0000000000000003"  # RocketMQ's 56 bytes
        "50524d54"
        "16428b11"
    )  # "PRMT", crc32
    decoded = decode_timer_check(raw)
    assert decoded.valid and decoded.last_timer_queue_offset == 77 and decoded.counter == 3
    torn = raw[:9] + b"\xff" + raw[10:]
    assert not decode_timer_check(torn).valid and not decode_timer_check(b"").valid


def test_delaycheck_entries():
    assert dc.header_bytes() == bytes.fromhex("50524d4400000001")
    entry = dc.encode_entry(10, 42)
    assert entry == bytes.fromhex("000000000000000a000000000000002aa22e081d")
    buf = bytearray(dc.DELAY_CHECK_FILE_SIZE_BYTES)
    buf[:8] = dc.header_bytes()
    buf[dc.entry_position(3) : dc.entry_position(3) + 20] = entry
    assert dc.decode_entry(buf, 3) == (10, 42)
    assert dc.decode_entry(buf, 1) == dc.NONE  # zeros: crc mismatch
    buf[dc.entry_position(3)] ^= 1
    assert dc.decode_entry(buf, 3) == dc.NONE  # torn
