"""SEND_BATCH_MESSAGE 320's body (../shared/docs/remoting.md §2.2): repeated
int32 totalSize | int32 magic(0) | int32 bodyCRC(0) | int32 flag | int32 bodyLen, body |
int16 propLen, props."""

from __future__ import annotations

import random

import pytest

from services.domain.remoting.batch import (
    BatchFormatError,
    decode_batch,
    decode_batch_raw,
    encode_batch,
    encode_batch_message,
)

# flag 7, body "hi", properties "UNIQ_KEY\x01ABC\x02" (13 bytes): totalSize 22 + 2 + 13 = 37.
FIRST = bytes.fromhex(
    "00000025"  # totalSize 37
    "00000000"  # magic
    "00000000"  # bodyCRC
    "00000007"  # flag
    "00000002" + "6869"  # bodyLen, "hi"
    "000d" + "554e49515f4b4559" + "01" + "414243" + "02"  # propLen 13, UNIQ_KEY \x01 ABC \x02
)
# flag -1, empty body, no properties: totalSize 22.
SECOND = bytes.fromhex("000000160000000000000000ffffffff000000000000")
BODY = FIRST + SECOND


def test_golden_bytes_decode():
    assert len(FIRST) == 37 and len(SECOND) == 22
    assert decode_batch(BODY) == [(7, b"hi", {"UNIQ_KEY": "ABC"}), (-1, b"", {})]
    assert decode_batch_raw(BODY) == [(7, b"hi", b"UNIQ_KEY\x01ABC\x02"), (-1, b"", b"")]


def test_golden_bytes_encode():
    assert encode_batch_message(7, b"hi", {"UNIQ_KEY": "ABC"}) == FIRST
    assert encode_batch([(7, b"hi", b"UNIQ_KEY\x01ABC\x02"), (-1, b"", {})]) == BODY


def test_any_buffer_is_read():
    expected = decode_batch(BODY)
    assert decode_batch(bytearray(BODY)) == expected
    assert decode_batch(memoryview(b"xx" + BODY)[2:]) == expected


def test_empty_body_is_no_message():
    assert decode_batch(b"") == []


def test_round_trip_of_many_messages():
    rng = random.Random(320)
    messages = [
        (
            rng.randrange(-(2**31), 2**31),
            rng.randbytes(rng.randrange(0, 300)),
            {"UNIQ_KEY": f"{i:032X}", "TAGS": f"tag{i % 3}", "KEYS": "k1 k2"},
        )
        for i in range(64)
    ]
    assert decode_batch(encode_batch(messages)) == messages, "seed 320"


def test_every_cut_inside_a_message_raises():
    boundaries = {len(FIRST), len(BODY)}
    for cut in range(1, len(BODY)):
        if cut in boundaries:
            assert len(decode_batch(BODY[:cut])) == 1
            continue
        with pytest.raises(BatchFormatError) as info:
            decode_batch(BODY[:cut])
        assert info.value.index == (0 if cut < len(FIRST) else 1), cut
        assert info.value.offset == (0 if cut < len(FIRST) else len(FIRST)), cut


def _patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    "body,words",
    [
        (_patched(BODY, 0, bytes.fromhex("00000026")), "TOTALSIZE 38 but its fields take 37"),
        (_patched(BODY, 16, bytes.fromhex("ffffffff")), "body length -1"),
        (_patched(BODY, 16, bytes.fromhex("7fffffff")), "body length 2147483647"),
        (_patched(BODY, 22, bytes.fromhex("8000")), "properties length -32768"),
        (_patched(BODY, 22, bytes.fromhex("000e")), "TOTALSIZE 37 but its fields take 38"),
        (BODY + b"\x00", "truncated: 1 bytes left"),
    ],
)
def test_garbage_raises_with_a_clear_message(body, words):
    with pytest.raises(BatchFormatError, match=words):
        decode_batch(body)


def test_the_error_names_the_message_and_its_offset():
    with pytest.raises(BatchFormatError, match=r"batch message 1 at byte 37: ") as info:
        decode_batch(FIRST + b"\x00" * 30)
    assert isinstance(info.value, ValueError)
    assert (info.value.index, info.value.offset) == (1, 37)


def test_more_messages_than_allowed_raise():
    assert len(decode_batch(BODY, max_messages=2)) == 2
    with pytest.raises(BatchFormatError, match="more than 1 messages"):
        decode_batch(BODY, max_messages=1)


def test_random_bytes_decode_or_raise_batch_format_error():
    seed = 29
    rng = random.Random(seed)
    for _ in range(2000):
        data = bytearray(rng.choice([BODY, FIRST, SECOND]))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            messages = decode_batch(bytes(data))
        except BatchFormatError:
            continue
        assert sum(
            22 + len(body) + len(encode_props) for _, body, encode_props in decode_batch_raw(bytes(data))
        ) == len(data), f"seed {seed}"
        assert len(messages) >= 1, f"seed {seed}"


def test_properties_over_int16_are_refused_when_encoding():
    with pytest.raises(ValueError):
        encode_batch_message(0, b"", {"K": "v" * 40000})
