"""The offsetMsgId (../shared/docs/remoting.md §2.2 "Response", §2.5): uppercase hex of the
store host's IP, its int32 port and the int64 commit-log offset; 32 chars for IPv4, 56 for IPv6."""

from __future__ import annotations

import pytest

from services.domain.format.commitlog_format import offset_msg_id
from services.domain.remoting.message_id import (
    decode_offset_msg_id,
    encode_offset_msg_id,
    offset_msg_ids,
    store_host_prefix,
)

# 10.0.0.5 = 0A000005, port 10911 = 0x2A9F, offset 0x1234.
V4_ID = "0A000005" + "00002A9F" + "0000000000001234"
# ::1, port 10911, offset 1.
V6_ID = "00000000000000000000000000000001" + "00002A9F" + "0000000000000001"


def test_ipv4_golden():
    assert len(V4_ID) == 32
    assert encode_offset_msg_id("10.0.0.5", 10911, 0x1234) == V4_ID
    assert decode_offset_msg_id(V4_ID) == ("10.0.0.5", 10911, 0x1234)


def test_ipv6_golden():
    assert len(V6_ID) == 56
    assert encode_offset_msg_id("::1", 10911, 1) == V6_ID
    assert encode_offset_msg_id("[::1]", 10911, 1) == V6_ID
    assert decode_offset_msg_id(V6_ID) == ("::1", 10911, 1)


def test_same_bytes_as_the_stored_record_codec():
    assert encode_offset_msg_id("192.168.1.20", 8080, 2**40 + 7) == offset_msg_id(
        (bytes([192, 168, 1, 20]), 8080), 2**40 + 7
    )


def test_lower_case_is_read():
    assert decode_offset_msg_id(V4_ID.lower()) == ("10.0.0.5", 10911, 0x1234)


def test_batch_ids_are_joined_by_commas():
    prefix = store_host_prefix("10.0.0.5", 10911)
    assert offset_msg_ids(prefix, [0x1234, 0x1260]) == V4_ID + "," + V4_ID[:-4] + "1260"
    assert offset_msg_ids(prefix, []) == ""


def test_largest_offset_and_port():
    msg_id = encode_offset_msg_id("255.255.255.255", 65535, 2**63 - 1)
    assert msg_id == "FFFFFFFF0000FFFF7FFFFFFFFFFFFFFF"
    assert decode_offset_msg_id(msg_id) == ("255.255.255.255", 65535, 2**63 - 1)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        V4_ID[:-1],
        V4_ID + "0",
        V6_ID[:-2],
        "G" + V4_ID[1:],  # not hex
        " " + V4_ID[1:],  # bytes.fromhex would skip the space
        "0A000005 0002A9F0000000000001234",
        "0A000005" + "00010000" + "0000000000001234",  # port 65536
        "0A000005" + "FFFFFFFF" + "0000000000001234",  # port -1
        "0A000005" + "00002A9F" + "8000000000000000",  # negative offset
        "０A000005" + "00002A9F" + "0000000000001234",  # a full-width digit
    ],
)
def test_malformed_ids_raise_value_error(bad):
    with pytest.raises(ValueError):
        decode_offset_msg_id(bad)


def test_a_non_string_raises_value_error():
    with pytest.raises(ValueError):
        decode_offset_msg_id(b"0A00000500002A9F0000000000001234")  # type: ignore[arg-type]


@pytest.mark.parametrize("host,port,offset", [("broker-a", 10911, 0), ("10.0.0.5", 70000, 0), ("10.0.0.5", 1, -1)])
def test_bad_encode_arguments_raise(host, port, offset):
    with pytest.raises(ValueError):
        encode_offset_msg_id(host, port, offset)
