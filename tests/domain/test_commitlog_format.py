"""CommitLog record format: the golden record (tests/support/commitlog_golden.py), round trips, corruption."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.format.commitlog_format import (
    BLANK,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    CorruptRecord,
    MessageRecord,
    body_crc,
    decode_offset_msg_id,
    decode_record,
    encode_blank,
    encode_record,
    host_from_string,
    host_to_string,
    offset_msg_id,
    record_size,
    tags_code,
    validate_record,
)
from services.domain.format.consume_queue_format import encode_unit
from services.domain.format.java_compat import java_hashmap_order, java_string_hash
from services.domain.format.properties_format import decode_properties, encode_properties
from tests.support.commitlog_golden import GOLDEN, golden_record


def test_golden_record_byte_for_byte():
    rec = golden_record()
    assert encode_record(rec) == GOLDEN
    assert rec.total_size == 210 == record_size(0, 14, 9, 96, MAGIC_V1)
    assert rec.body_crc == 1774740973 == body_crc(b"Hello RocketMQ")


def test_golden_record_decodes_to_its_fields():
    rec = decode_record(GOLDEN, 0, len(GOLDEN))
    assert rec.topic == "TopicTest" and rec.body == b"Hello RocketMQ"
    assert rec.properties["KEYS"] == "k1 k2" and rec.tags == "TagA" and rec.keys == ["k1", "k2"]
    assert host_to_string(rec.born_host) == "127.0.0.1:54321"
    assert host_to_string(rec.store_host) == "192.168.0.2:10911"
    assert rec.store_timestamp_ms == 1700000000123
    assert rec.offset_msg_id == "C0A8000200002A9F0000000000000000"
    assert tags_code(rec) == 2598919 == java_string_hash("TagA")
    assert encode_unit(0, 210, tags_code(rec)).hex(" ") == "00 00 00 00 00 00 00 00 00 00 00 d2 00 00 00 00 00 27 a8 07"


def test_blank_record_golden():
    assert encode_blank(100).hex(" ") == "00 00 00 64 cb d4 31 94"
    assert decode_record(encode_blank(100) + bytes(92), 0, 100) is BLANK


def test_java_hashmap_order_matches_the_golden_properties():
    keys = ["TAGS", "KEYS", "WAIT", "UNIQ_KEY", "CLUSTER"]
    assert java_hashmap_order(keys) == ["UNIQ_KEY", "CLUSTER", "TAGS", "KEYS", "WAIT"]
    # Op records use a default (16-bucket) map: on disk exactly WAIT then TAGS.
    assert encode_properties({"TAGS": "d", "WAIT": "true"}, java_order=False) == b"TAGS\x01d\x02WAIT\x01true\x02"
    assert java_hashmap_order(["TAGS", "WAIT"], initial_capacity=16) == ["WAIT", "TAGS"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", 0),
        ("a", 97),
        ("TagA", 2598919),
        ("polygenelubricants", -2147483648),
        ("héllo", 103094734),
        ("😀", 1772899),  # values from JDK 17,
    ],
)
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_properties_decode_follows_java():
    assert decode_properties(b"a\x01b\x02") == {"a": "b"}
    assert decode_properties(b"\x01b\x02a\x01\x02ok\x01v\x02") == {"ok": "v"}  # empty name/value dropped
    assert decode_properties(b"k\x011\x02k\x012\x02") == {"k": "2"}  # later wins
    assert decode_properties(b"k\x01v") == {"k": "v"}  # no trailing separator
    assert decode_properties(b"k\x01a\x01b\x02") == {"k": "a\x01b"}


def test_v2_record_for_long_retry_topic():
    topic = "%RETRY%" + "g" * 200
    rec = MessageRecord(topic=topic, queue_id=0, body=b"b")
    data = encode_record(rec)
    assert rec.magic == MAGIC_V2
    assert int.from_bytes(data[4:8], "big") == MAGIC_V2
    assert decode_record(data, 0, len(data)).topic == topic


def test_ipv6_hosts_set_flags_and_shift_fields():
    rec = MessageRecord(
        topic="T",
        queue_id=1,
        body=b"xyz",
        born_host=host_from_string("[::1]:5"),
        store_host=host_from_string("[fe80::2]:10911"),
        phy_offset=4096,
    )
    data = encode_record(rec)
    assert rec.sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0x30
    back = decode_record(data, 0, len(data))
    assert host_to_string(back.born_host) == "[::1]:5" and back.phy_offset == 4096
    assert len(rec.offset_msg_id) == 56
    assert decode_offset_msg_id(rec.offset_msg_id) == (rec.store_host, 4096)


def test_offset_msg_id_round_trip_and_bad_ids():
    host = host_from_string("10.0.0.7:10911")
    assert decode_offset_msg_id(offset_msg_id(host, 123456789)) == (host, 123456789)
    for bad in ("", "XYZ", "00" * 15):
        with pytest.raises(ValueError):
            decode_offset_msg_id(bad)


def test_record_crc_trailer_catches_any_flipped_byte():
    rec = golden_record()
    data = encode_record(rec, prop_crc=True)
    assert data.endswith(b"__CRC32#\x01" + data[-11:-1] + b"\x02") and len(data) == 230
    crc = zlib.crc32(data[:-20]) & 0x7FFFFFFF
    assert data[-11:-1] == str(crc)[::-1].ljust(10, "0").encode()
    assert validate_record(memoryview(data), 0, len(data), 0, require_prop_crc=True) == 230
    assert "__CRC32#" not in decode_record(data, 0, len(data)).properties
    for pos in range(len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x04
        with pytest.raises(CorruptRecord):
            validate_record(memoryview(flipped), 0, len(flipped), 0, require_prop_crc=True)
    with pytest.raises(CorruptRecord, match="trailer missing"):
        validate_record(memoryview(GOLDEN), 0, len(GOLDEN), 0, require_prop_crc=True)


def test_every_corruption_is_detected():
    data = bytearray(GOLDEN)
    view = memoryview(data)
    assert validate_record(view, 0, len(data), 0) == 210
    with pytest.raises(CorruptRecord, match="phy offset"):
        validate_record(view, 0, len(data), 4096)
    for pos in range(len(GOLDEN)):
        flipped = bytearray(GOLDEN)
        flipped[pos] ^= 0x40
        # RocketMQ's format protects lengths, magic, body (CRC) and, in our check, the record's
        # own phy offset; other header fields, topic and property text carry no checksum.
        checked = pos < 12 or 28 <= pos < 36 or 84 <= pos < 103 or 112 <= pos < 114
        if not checked:
            continue
        with pytest.raises(CorruptRecord):
            validate_record(memoryview(flipped), 0, len(flipped), 0)
    with pytest.raises(CorruptRecord):
        decode_record(bytes(GOLDEN[:100]), 0, 100)


@settings(max_examples=200, deadline=None)
@given(
    topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,127}", fullmatch=True),
    body=st.binary(max_size=2048),
    queue_id=st.integers(0, 1023),
    props=st.dictionaries(
        st.text(
            alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
            min_size=1,
            max_size=8,
        ).filter(lambda k: k != "__CRC32#"),
        st.text(
            alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
            min_size=1,
            max_size=16,
        ),
        max_size=6,
    ),
    flag=st.integers(-(2**31), 2**31 - 1),
    queue_offset=st.integers(0, 2**62),
    phy_offset=st.integers(0, 2**62),
    born_ms=st.integers(0, 2**62),
    reconsume=st.integers(0, 100),
)
def test_encode_decode_round_trip(topic, body, queue_id, props, flag, queue_offset, phy_offset, born_ms, reconsume):
    rec = MessageRecord(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties=dict(props),
        flag=flag,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        born_timestamp_ms=born_ms,
        reconsume_times=reconsume,
    )
    data = encode_record(rec)
    back = decode_record(data, 0, len(data))
    assert (back.topic, back.queue_id, back.body, back.flag, back.queue_offset, back.phy_offset) == (
        topic,
        queue_id,
        body,
        flag,
        queue_offset,
        phy_offset,
    )
    assert back.properties == props
    assert back.body_crc == (zlib.crc32(body) & 0x7FFFFFFF if body else 0)
    assert validate_record(memoryview(data), 0, len(data), phy_offset) == len(data)
