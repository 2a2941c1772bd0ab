"""The numpy/Arrow CommitLog decoder against the store's own record encoder and decoder.

No Spark: pipeline.decode runs on numpy and pyarrow only.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.components import require

require("pyarrow", module_level=True)
import pyarrow as pa  # noqa: E402

from pipeline.arrow_util import decimal_int64, parse_properties  # noqa: E402
from pipeline.decode import (  # noqa: E402
    ALL_COLUMNS,
    decode_batch,
    find_record_start,
    read_consume_queue,
    read_segment,
    walk,
    walk_array,
)
from pipeline.errors import CorruptSegment  # noqa: E402
from services.domain.format.commitlog_format import (  # noqa: E402
    PROP_CRC_PREFIX,
    MessageRecord,
    decode_record,
    encode_blank,
    encode_record,
    fill_prop_crc,
    host_from_string,
    host_to_string,
    tags_code,
)
from services.domain.format.consume_queue_format import BLANK_UNIT_BYTES, encode_unit  # noqa: E402
from services.domain.format.properties_format import (  # noqa: E402
    INNER_MULTI_DISPATCH,
    INNER_MULTI_QUEUE_OFFSET,
    LITE_TOPIC,
)
from tests.support.commitlog_golden import GOLDEN, golden_record  # noqa: E402

HOSTS = ["127.0.0.1:54321", "[::1]:7", "10.0.0.2:65000", "[fe80::1]:10911"]


def build_log(records: list[MessageRecord], prop_crc: list[bool], tail: int = 64) -> tuple[bytes, list[int]]:
    """Records back to back (phy offsets set), then a blank record filling ``tail`` bytes."""
    out = bytearray()
    starts = []
    for record, crc in zip(records, prop_crc):
        record.phy_offset = len(out)
        raw = bytearray(encode_record(record, prop_crc=crc))
        if crc:
            fill_prop_crc(raw, 0, len(raw))
        starts.append(len(out))
        out += raw
    out += encode_blank(tail) + bytes(tail - 8)
    return bytes(out), starts


def decode_all(log: bytes, verify_crc: bool = False, columns=ALL_COLUMNS) -> tuple[list[dict], list[int], str]:
    starts, _, why = walk(log, 0, len(log), len(log), 1 << 30)
    batch = decode_batch(
        log, np.frombuffer(log, np.uint8), np.array(starts, np.int64), 0, "00000000000000000000", verify_crc, columns
    )
    return batch.to_pylist(), starts, why


def assert_matches_reference(row: dict, log: bytes, start: int) -> None:
    ref = decode_record(log, start, len(log))
    assert row["commitLogOffset"] == ref.phy_offset == start
    assert row["totalSize"] == ref.total_size and (row["magicCode"] & 0xFFFFFFFF) == ref.magic
    assert row["bodyCrc"] == ref.body_crc and row["queueId"] == ref.queue_id and row["flag"] == ref.flag
    assert row["queueOffset"] == ref.queue_offset and row["sysFlag"] == ref.sys_flag
    assert int(row["bornTimestamp"].timestamp() * 1000) == ref.born_timestamp_ms
    assert int(row["storeTimestamp"].timestamp() * 1000) == ref.store_timestamp_ms
    assert row["bornHost"] == host_to_string(ref.born_host) and row["storeHost"] == host_to_string(ref.store_host)
    assert row["reconsumeTimes"] == ref.reconsume_times
    assert row["preparedTransactionOffset"] == ref.prepared_transaction_offset
    assert row["topic"] == ref.topic and row["body"] == ref.body
    assert dict(row["properties"]) == ref.properties and [k for k, _ in row["properties"]] == list(ref.properties)
    assert row["tags"] == ref.tags and row["keys"] == ref.keys and row["uniqKey"] == ref.uniq_key
    assert row["tagsCode"] == tags_code(ref, (1000, 5000, 10000))
    assert row["liteTopic"] == ref.properties.get(LITE_TOPIC)
    assert row["liteQueueOffset"] == lite_offset(ref.properties.get(INNER_MULTI_QUEUE_OFFSET))


def lite_offset(text: str | None) -> int | None:
    """The liteQueueOffset column's rule: 1-19 ASCII digits within int64, else null."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) >= 2**63:
        return None
    return int(text)


def test_golden_record():
    """The golden record (tests/support/commitlog_golden.py): the bytes a Java broker writes (v1, no
    CRC trailer)."""
    log = GOLDEN + encode_blank(16) + bytes(8)
    rows, starts, why = decode_all(log, verify_crc=True)
    assert why == "blank" and starts == [0]
    [row] = rows
    assert_matches_reference(row, log, 0)
    assert row["topic"] == "TopicTest" and row["body"] == b"Hello RocketMQ" and row["tags"] == "TagA"
    assert row["keys"] == ["k1", "k2"] and row["uniqKey"] == "7F0000010B8C18B4AAC2730A64B50000"
    assert row["storeHost"] == "192.168.0.2:10911" and row["bornHost"] == "127.0.0.1:54321"
    assert row["tagsCode"] == 2598919 and row["crcValid"] is True and row["totalSize"] == 210
    assert (
        row["properties"] == list(golden_record().properties.items())
        or dict(row["properties"]) == golden_record().properties
    )


def random_record(rng: random.Random, i: int) -> MessageRecord:
    props = {}
    if rng.random() < 0.8:
        props["TAGS"] = rng.choice(["TagA", "b", "ü-tag", "t" * 40])
    if rng.random() < 0.6:
        props["KEYS"] = rng.choice(["k1 k2", "k3", "  a  b ", "z", "ключ 2"])
    if rng.random() < 0.9:
        props["UNIQ_KEY"] = f"{rng.getrandbits(128):032X}"
    for n in range(rng.randrange(4)):
        props[f"p{n}"] = rng.choice(["red", "x" * 30, "ü"])
    if rng.random() < 0.3:  # a lite message as the store writes it, or odd values
        props[LITE_TOPIC] = rng.choice(["chat-1", "c", "ü-lite"])
        props[INNER_MULTI_DISPATCH] = "%LMQ%$T1$" + props[LITE_TOPIC]
        props[INNER_MULTI_QUEUE_OFFSET] = rng.choice(
            [f"{rng.randrange(10**6):019d}", "7", "3,9", "-1", "x", "9223372036854775807", "9223372036854775808"]
        )
    if rng.random() < 0.05:  # a long name that shares the lite keys' length, head and tail
        props["__LIXX_TOPIC"] = "decoy"
    return MessageRecord(
        topic=rng.choice(["T1", "TopicB", "%RETRY%" + "g" * 125, "Tö", "SCHEDULE_TOPIC_XXXX"]),
        queue_id=rng.randrange(16),
        body=rng.randbytes(rng.randrange(0, 300)),
        properties=props,
        flag=rng.randrange(-5, 5),
        sys_flag=rng.choice([0, 0, 0x1, 0x4, 0x8, 0xC]),
        born_timestamp_ms=1_700_000_000_000 + i,
        born_host=host_from_string(rng.choice(HOSTS)),
        store_timestamp_ms=1_700_000_000_500 + i,
        store_host=host_from_string(rng.choice(HOSTS)),
        reconsume_times=rng.randrange(3),
        prepared_transaction_offset=rng.randrange(10_000),
        queue_offset=i,
    )


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 300))
def test_random_records_match_the_store_decoder(seed, count):
    rng = random.Random(seed)
    records = [random_record(rng, i) for i in range(count)]
    for record in records:
        if record.topic == "SCHEDULE_TOPIC_XXXX" and rng.random() < 0.7:
            record.properties["DELAY"] = str(rng.randrange(0, 5))
    log, expected = build_log(records, [rng.random() < 0.5 for _ in records])
    starts, _, why = walk(log, 0, len(log), len(log), 1 << 30)
    assert starts == expected and why == "blank"
    batch = decode_batch(
        log, np.frombuffer(log, np.uint8), np.array(starts), 0, "seg", True, ALL_COLUMNS, (1000, 5000, 10000)
    )
    for row, start in zip(batch.to_pylist(), starts):
        assert_matches_reference(row, log, start)
        assert row["crcValid"] is True and row["segment"] == "seg"


def test_crc_mismatch_is_marked():
    rng = random.Random(7)
    records = [random_record(rng, i) for i in range(20)]
    for record in records:
        record.body = b"payload-%d" % record.queue_offset
    log, starts = build_log(records, [True] * 20)
    broken = bytearray(log)
    broken[starts[3] + 88] ^= 0xFF  # in the body (or a v6 header): the CRCs notice
    broken[starts[5] + 12] ^= 0x01  # QUEUEID: only the whole-record CRC notices
    rows, _, _ = decode_all(bytes(broken), verify_crc=True)
    valid = [r["crcValid"] for r in rows]
    assert valid[3] is False and valid[5] is False and valid.count(False) == 2
    assert all(r["crcValid"] is None for r in decode_all(log)[0])


def test_column_subset_decodes_only_those():
    rng = random.Random(3)
    log, _ = build_log([random_record(rng, i) for i in range(50)], [True] * 50)
    full, _, _ = decode_all(log)
    subset, _, _ = decode_all(log, columns=("queueId", "keys", "tagsCode"))
    assert list(subset[0]) == ["queueId", "keys", "tagsCode"]
    assert [(r["queueId"], r["keys"], r["tagsCode"]) for r in subset] == [
        (r["queueId"], r["keys"], r["tagsCode"]) for r in full
    ]
    lite, _, _ = decode_all(log, columns=("liteTopic", "liteQueueOffset"))
    assert lite == [{"liteTopic": r["liteTopic"], "liteQueueOffset": r["liteQueueOffset"]} for r in full]
    assert any(r["liteQueueOffset"] is not None for r in lite)


def test_lite_columns_of_a_batch_without_lite_messages():
    """Names found nowhere in a batch are null without a parse; one found only in a body (or in
    a value with a stray 0x01, parsed row by row) is parsed and still null."""
    rng = random.Random(4)
    records = [random_record(rng, i) for i in range(30)]
    for record in records:
        for name in (LITE_TOPIC, INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET):
            record.properties.pop(name, None)
    log, _ = build_log(records, [True] * 30)
    columns = ("liteTopic", "liteQueueOffset", "tagsCode")
    rows, _, _ = decode_all(log, columns=columns)
    assert [(r["liteTopic"], r["liteQueueOffset"]) for r in rows] == [(None, None)] * 30
    records[7].body = b"__LITE_TOPIC\x01INNER_MULTI_QUEUE_OFFSET\x01"
    records[8].properties["note"] = "INNER_MULTI_QUEUE_OFFSET\x01"
    decoy, _ = build_log(records, [True] * 30)
    assert decode_all(decoy, columns=columns)[0] == rows


def test_property_columns_agree_on_the_row_by_row_path():
    """A batch with one malformed property string is parsed row by row (decode_properties): the
    same columns as the vectorised path for the well-formed rows."""
    rows = [
        b"TAGS\x01a\x02__LITE_TOPIC\x01chat\x02INNER_MULTI_QUEUE_OFFSET\x010000000000000000004\x02",
        b"KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02",
        b"",
    ]
    names = ("TAGS", "UNIQ_KEY", LITE_TOPIC, INNER_MULTI_QUEUE_OFFSET)

    def parse(strings: list[bytes]):
        values = np.frombuffer(b"".join(strings), np.uint8)
        offsets = np.cumsum([0] + [len(x) for x in strings]).astype(np.int64)
        props, columns, keys = parse_properties(values, offsets, True, names, True)
        return props.to_pylist(), {n: c.to_pylist() for n, c in columns.items()}, keys.to_pylist()

    fast = parse(rows)
    slow = parse(rows + [b"no-separator\x02"])
    assert fast[0] == slow[0][:3] and fast[2] == slow[2][:3]
    assert {n: c[:3] for n, c in slow[1].items()} == fast[1]
    assert fast[1][LITE_TOPIC] == ["chat", None, None] and fast[1]["UNIQ_KEY"] == [None, "U", None]
    assert decimal_int64(pa.array(fast[1][INNER_MULTI_QUEUE_OFFSET], pa.string())).to_pylist() == [4, None, None]


def test_walk_stops_at_unwritten_zeros_and_at_stop():
    rng = random.Random(5)
    records = [random_record(rng, i) for i in range(10)]
    log, starts = build_log(records, [False] * 10)
    cut = log[: starts[-1]] + bytes(4096)  # the last segment: zeros after the written data
    found, position, why = walk(cut, 0, len(cut), len(cut), 100)
    assert found == starts[:-1] and why == "end" and position == starts[-1]
    found, position, why = walk(log, 0, len(log), starts[4], 100)
    assert found == starts[:4] and why == "stop"
    found, position, why = walk(log, 0, len(log), len(log), 3)
    assert found == starts[:3] and why == "more" and position == starts[3]


def test_find_record_start_resynchronises_anywhere():
    rng = random.Random(11)
    records = [random_record(rng, i) for i in range(40)]
    for record in records:  # bodies full of magic codes must not fool the search
        record.body = bytes.fromhex("daa320a7daa320ab") * 8
    log, starts = build_log(records, [True] * 40)
    for position in range(0, starts[-1] + 1, 7):
        expected = next(s for s in starts if s >= position)
        assert find_record_start(log, position, len(log), 0) == expected


def test_walk_array_is_walk():
    """The numpy walk gives walk's starts, position and reason: bodies full of magic codes,
    the blank record, unwritten zeros, ``stop`` and ``max_records`` anywhere."""
    rng = random.Random(17)
    records = [random_record(rng, i) for i in range(300)]
    for record in records[::7]:
        record.body = bytes.fromhex("daa320a7daa320ab") * rng.randrange(1, 9)
    for record in records[3::11]:  # a whole record inside a body: a candidate that is no record
        record.body = b"z" * rng.randrange(3) + encode_record(MessageRecord(topic="F", queue_id=0, body=b"f"))
    log, starts = build_log(records, [rng.random() < 0.5 for _ in records])
    cut = log[: starts[-1] + 30] + bytes(5000)
    for buf in (log, cut):
        a = np.frombuffer(buf, np.uint8)
        cases = [
            (0, len(buf), 1 << 30),
            (starts[3], len(buf), 1 << 30),
            (0, starts[200], 1 << 30),
            (0, starts[200] + 1, 1 << 30),
            (starts[10], len(buf), 70),
            (5, len(buf), 10),
        ]
        cases += [(starts[rng.randrange(300)], rng.randrange(len(buf) + 1), rng.randrange(1, 400)) for _ in range(40)]
        for pos, stop, most in cases:
            expected = walk(buf, pos, len(buf), stop, most)
            got = walk_array(buf, a, pos, len(buf), stop, most)
            assert (got[0].tolist(), got[1], got[2]) == expected, (pos, stop, most)


def test_gather_array_is_gather():
    from pipeline import arrow_util as au

    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, 5000, dtype=np.uint8)
    for mean in (3, 40, 200):
        lengths = np.minimum(rng.integers(0, 2 * mean, 300), 400)
        lengths[:20] = np.arange(20)
        starts = rng.integers(0, len(a) - lengths)
        starts[-1], lengths[-1] = len(a) - 1, 1  # a range at the very end of ``a``
        for tail in (False, True):
            s, n = (starts, lengths) if tail else (starts[:-1], lengths[:-1])
            got = au.gather_array(a, s, n)
            assert got.type == pa.binary() and got.to_pylist() == [a[i : i + k].tobytes() for i, k in zip(s, n)]
            values, offsets = au.buffers_of(got)
            assert values[offsets[0] : offsets[-1]].tobytes() == b"".join(a[i : i + k].tobytes() for i, k in zip(s, n))


def test_find_record_start_in_unwritten_zeros():
    rng = random.Random(19)
    log, starts = build_log([random_record(rng, i) for i in range(5)], [True] * 5)
    cut = log[: starts[-1]] + bytes(1 << 20)
    assert find_record_start(cut, starts[2] + 1, len(cut), 0) == starts[3]
    assert find_record_start(cut, starts[4] + 1, len(cut), 0) == len(cut)
    assert find_record_start(cut, starts[4] - 1, len(cut), 0) == len(cut)


def test_find_record_start_across_a_long_gap():
    record = MessageRecord(topic="T", queue_id=0, body=b"x", phy_offset=300_001)
    log = bytes(300_001) + encode_record(record) + encode_blank(64) + bytes(56)
    assert find_record_start(log, 5, len(log), 0) == 300_001
    assert find_record_start(log, 300_002, len(log), 0) == len(log) - 64  # the blank record


def test_read_segment_splits_cover_every_record_once(tmp_path):
    rng = random.Random(13)
    records = [random_record(rng, i) for i in range(200)]
    log, starts = build_log(records, [True] * 200, tail=1000)
    base = 1 << 30
    for record, start in zip(records, starts):  # PHYSICALOFFSET names the segment's base
        record.phy_offset = base + start
    log = b"".join(encode_with_crc(r) for r in records) + encode_blank(1000) + bytes(992)
    path = tmp_path / f"{base:020d}"
    path.write_bytes(log)
    seen = []
    cuts = list(range(base, base + len(log), 1500)) + [base + len(log)]
    for low, high in zip(cuts, cuts[1:]):
        for batch in read_segment(path, base, None if low == base else low, high, batch_rows=17):
            seen += batch.column("commitLogOffset").to_pylist()
    assert seen == [base + s for s in starts]


def encode_with_crc(record: MessageRecord) -> bytes:
    raw = bytearray(encode_record(record, prop_crc=True))
    fill_prop_crc(raw, 0, len(raw))
    assert raw[-20:-11] == PROP_CRC_PREFIX
    return bytes(raw)


def test_corrupt_length_arithmetic_names_the_offset():
    rng = random.Random(17)
    records = [random_record(rng, i) for i in range(3)]
    for record in records:  # IPv4 hosts: BODY's length is at +84
        record.born_host = record.store_host = host_from_string("127.0.0.1:1")
    log, starts = build_log(records, [False] * 3)
    broken = bytearray(log)
    body_len_pos = starts[1] + 84
    broken[body_len_pos + 3] ^= 0x01  # the body length no longer adds up to TOTALSIZE
    with pytest.raises(CorruptSegment, match=f"phy offset {starts[1]}"):
        decode_all(bytes(broken))


def test_consume_queue_units(tmp_path):
    units = BLANK_UNIT_BYTES * 3 + b"".join(encode_unit(100 * i, 90 + i, -i) for i in range(5)) + bytes(40)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(units)
    [batch] = list(read_consume_queue(path, "T", 2, 0))
    assert batch.column("queueOffset").to_pylist() == [3, 4, 5, 6, 7]
    assert batch.column("commitLogOffset").to_pylist() == [0, 100, 200, 300, 400]
    assert batch.column("size").to_pylist() == [90, 91, 92, 93, 94]
    assert batch.column("tagsCode").to_pylist() == [0, -1, -2, -3, -4]
    assert set(batch.column("topic").to_pylist()) == {"T"} and set(batch.column("queueId").to_pylist()) == {2}
