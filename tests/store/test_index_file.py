"""IndexFile / IndexService: golden bytes (layout: services/domain/format/index_format.py), the
put/select quirks, rolling, reload, abnormal-load deletion, expiry, truncation, the dispatch
filters, and build_index_batch: byte-identical to one (pre-batch) build_index per record."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.format.index_format import (
    INDEX_ENTRY_SIZE_BYTES,
    INDEX_HEADER_SIZE_BYTES,
    IndexHeader,
    decode_entry,
    decode_header,
    encode_entry,
    encode_header,
    entry_position,
    index_file_size_bytes,
    index_key_hash,
    index_key_hash_from_u32,
    java_hash_extend_u32,
    slot_position,
    time_diff_seconds,
)
from services.domain.format.java_compat import java_string_hash
from services.runtime.clock import ManualClock
from services.store.index.index_file import RESERVE_CHUNK_BYTES, IndexFile, index_file_name
from services.store.index.service import IndexService
from tests.support.index_files import (
    ENTRIES,
    FAR_FUTURE,
    FILE_SIZE,
    SLOTS,
    SYSFLAG_COMMIT,
    SYSFLAG_PREPARED,
    SYSFLAG_ROLLBACK,
    T0,
    file_bytes,
    new_service,
)


def naive_java_hash(text: str) -> int:
    """String.hashCode() written out, as a check independent of java_compat."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def key_with_java_hash(prefix: str, length: int, target_u32: int) -> str:
    """A key of ``length`` chars in '0'..'N' such that JavaHash(prefix + key) == target."""
    weights = [pow(31, length - 1 - i, 1 << 32) for i in range(length)]
    rest = (target_u32 - naive_java_hash(prefix) * pow(31, length, 1 << 32) - sum(48 * w for w in weights)) % (1 << 32)
    digits = []
    for _ in range(length):
        rest, digit = divmod(rest, 31)
        digits.append(digit)
    assert rest == 0
    return "".join(chr(48 + d) for d in reversed(digits))


def new_file(tmp_path: Path, name: str = "20231115061320500", **preset) -> IndexFile:
    return IndexFile.create(tmp_path / name, SLOTS, ENTRIES, **preset)


# -- format ------------------------------------------------------------------------------------
def test_sizes_and_positions() -> None:
    assert index_file_size_bytes(5_000_000, 20_000_000) == 420_000_040
    assert index_file_size_bytes(SLOTS, ENTRIES) == FILE_SIZE == 8440
    assert slot_position(SLOTS, 0) == 40 and slot_position(SLOTS, 291) == 40 + 91 * 4
    assert entry_position(SLOTS, 0) == 440 and entry_position(SLOTS, 3) == 500
    assert entry_position(SLOTS, ENTRIES - 1) + INDEX_ENTRY_SIZE_BYTES == FILE_SIZE


@given(
    st.builds(IndexHeader, *[st.integers(-(1 << 63), (1 << 63) - 1)] * 4, *[st.integers(-(1 << 31), (1 << 31) - 1)] * 2)
)
def test_header_round_trip(header: IndexHeader) -> None:
    data = encode_header(header)
    assert len(data) == INDEX_HEADER_SIZE_BYTES
    assert decode_header(data) == header


@given(
    st.integers(0, (1 << 31) - 1),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-(1 << 31), (1 << 31) - 1),
)
def test_entry_round_trip(key_hash: int, phy_offset: int, time_diff: int, prev_index: int) -> None:
    data = encode_entry(key_hash, phy_offset, time_diff, prev_index)
    assert len(data) == INDEX_ENTRY_SIZE_BYTES
    assert decode_entry(b"xx" + data, 2) == (key_hash, phy_offset, time_diff, prev_index)


def test_key_hash_known_values() -> None:
    assert naive_java_hash("hello") == java_string_hash("hello") == 99162322
    assert index_key_hash("T#Aa") == index_key_hash("T#BB") == 2538191  # "Aa"/"BB" collide in Java
    assert index_key_hash("T#x") == 84 * 31**2 + 35 * 31 + 120 == 81929
    # Math.abs(Integer.MIN_VALUE) is still negative in Java; RocketMQ maps it to 0.
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash_from_u32(1 << 31) == 0
    assert index_key_hash_from_u32(0xFFFFFFFF) == 1
    negative = key_with_java_hash("T#", 7, 0x80000001)
    assert java_string_hash("T#" + negative) == -0x7FFFFFFF
    assert index_key_hash("T#" + negative) == 0x7FFFFFFF


@settings(max_examples=300)
@given(st.text(max_size=40), st.text(max_size=600))
def test_fast_hash_equals_java_hash(prefix: str, text: str) -> None:
    prefix_u32 = java_string_hash(prefix) & 0xFFFFFFFF
    assert java_hash_extend_u32(prefix_u32, text) == java_string_hash(prefix + text) & 0xFFFFFFFF
    assert java_hash_extend_u32(0, text) == naive_java_hash(text) & 0xFFFFFFFF
    assert index_key_hash_from_u32(java_hash_extend_u32(0, text)) == index_key_hash(text)


def test_time_diff_seconds_rules() -> None:
    assert time_diff_seconds(T0, 0) == 0  # no begin time yet
    assert time_diff_seconds(T0 + 2999, T0) == 2
    assert time_diff_seconds(T0 - 500, T0) == 0  # Java truncates -0.5 s to 0
    assert time_diff_seconds(T0 - 5000, T0) == 0  # clamped
    assert time_diff_seconds(FAR_FUTURE, 1) == 0x7FFFFFFF  # clamped


def test_file_name_is_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        monkeypatch.setenv("TZ", "UTC0")
        time.tzset()
        assert index_file_name(T0) == "20231114221320500"
        monkeypatch.setenv("TZ", "CST-8")  # UTC+8, RocketMQ's usual deployment zone
        time.tzset()
        assert index_file_name(T0) == "20231115061320500"
        assert index_file_name(T0 + 7) == "20231115061320507"
    finally:
        monkeypatch.undo()
        time.tzset()


# -- IndexFile: golden bytes -----------------------------------------------------------------
def test_golden_file_bytes(tmp_path: Path) -> None:
    index_file = new_file(tmp_path)
    assert os.path.getsize(index_file.path) == FILE_SIZE
    assert file_bytes(index_file) == bytes(FILE_SIZE)  # fresh: index_count 0 on disk
    assert index_file.index_count == 1  # ... but 1 in memory

    assert index_file.put_key("T#Aa", 100, T0)  # slot 91, first entry
    assert index_file.put_key("T#BB", 200, T0 + 2500)  # same Java hash: chains to 1
    assert index_file.put_key("T#x", 300, T0 + 999)  # slot 29, < 1 s after begin
    assert index_file.put_key("T#R", 400, T0 + 61_000)  # other hash, slot 91: chains to 2
    data = file_bytes(index_file)

    assert data[:40] == bytes.fromhex(
        "0000018bcfe569f4"  # begin_timestamp = T0 (set by the first entry)
        "0000018bcfe6583c"  # end_timestamp = T0 + 61 s
        "0000000000000064"  # begin_phy_offset = 100
        "0000000000000190"  # end_phy_offset = 400
        "00000002"  # hash_slot_count: slots 91 and 29
        "00000005"
    )  # index_count = 4 entries + 1
    slots = data[40:440]
    assert slots[91 * 4 : 92 * 4] == bytes.fromhex("00000004")
    assert slots[29 * 4 : 30 * 4] == bytes.fromhex("00000003")
    assert slots[: 29 * 4] + slots[30 * 4 : 91 * 4] + slots[92 * 4 :] == bytes(98 * 4)
    assert data[440:460] == bytes(20)  # entry 0 is never used
    assert data[460:540] == bytes.fromhex(
        "0026bacf"
        "0000000000000064"
        "00000000"
        "00000000"  # 1: T#Aa, first entry: diff 0
        "0026bacf"
        "00000000000000c8"
        "00000002"
        "00000001"  # 2: T#BB, 2.5 s -> 2, prev 1
        "00014009"
        "000000000000012c"
        "00000000"
        "00000000"  # 3: T#x, 0.999 s -> 0
        "00013fe3"
        "0000000000000190"
        "0000003d"
        "00000002"
    )  # 4: T#R, 61 s, prev 2
    assert data[540:] == bytes(FILE_SIZE - 540)
    assert index_file.header() == IndexHeader(T0, T0 + 61_000, 100, 400, 2, 5)

    # Select walks slot 91: 4 (hash differs, skipped), 2, 1. Collisions come back.
    assert index_file.select_phy_offsets("T#Aa", 10, 0, FAR_FUTURE) == [200, 100]
    assert index_file.select_phy_offsets("T#BB", 10, 0, FAR_FUTURE) == [200, 100]
    assert index_file.select_phy_offsets("T#R", 10, 0, FAR_FUTURE) == [400]
    assert index_file.select_phy_offsets("T#x", 10, 0, FAR_FUTURE) == [300]
    assert index_file.select_phy_offsets("T#nope", 10, 0, FAR_FUTURE) == []
    assert index_file.select_phy_offsets("T#Aa", 1, 0, FAR_FUTURE) == [200]
    index_file.close()


def test_rolled_file_first_entry_time_diff_quirk(tmp_path: Path) -> None:
    index_file = new_file(tmp_path, end_phy_offset=5000, end_timestamp_ms=T0)
    assert file_bytes(index_file)[:40] == bytes.fromhex(
        "0000018bcfe569f40000018bcfe569f4000000000000138800000000000013880000000000000000"
    )
    assert index_file.put_key("T#x", 6000, T0 + 7300)
    data = file_bytes(index_file)
    assert data[:40] == bytes.fromhex(
        "0000018bcfe586780000018bcfe58678000000000000177000000000000017700000000100000002"
    )
    # time_diff was taken against the pre-set begin (T0) before begin moved to T0 + 7.3 s.
    assert data[460:480] == bytes.fromhex("0001400900000000000017700000000700000000")
    # So the entry reads back as stored at T0 + 7.3 s + 7 s.
    assert index_file.select_phy_offsets("T#x", 10, T0 + 7300, T0 + 7300) == []
    assert index_file.select_phy_offsets("T#x", 10, T0 + 14_300, T0 + 14_300) == [6000]
    index_file.close()


def test_time_diff_clamped_to_java_int_max(tmp_path: Path) -> None:
    index_file = new_file(tmp_path)
    index_file.put_key("T#a", 1, 1)  # begin_timestamp = 1 ms
    index_file.put_key("T#b", 2, FAR_FUTURE)
    index_file.put_key("T#c", 3, 0)  # before begin: 0
    assert decode_entry(file_bytes(index_file), entry_position(SLOTS, 2))[2] == 0x7FFFFFFF
    assert decode_entry(file_bytes(index_file), entry_position(SLOTS, 3))[2] == 0
    index_file.close()


def test_out_of_range_slot_value_treated_as_empty(tmp_path: Path) -> None:
    index_file = new_file(tmp_path)
    slot = slot_position(SLOTS, index_key_hash("T#x"))
    index_file._mm[slot : slot + 4] = (77).to_bytes(4, "big")  # stale: > index_count
    assert index_file.select_phy_offsets("T#x", 10, 0, FAR_FUTURE) == []
    index_file.put_key("T#x", 10, T0)
    assert decode_entry(file_bytes(index_file), entry_position(SLOTS, 1))[3] == 0  # prev reset
    assert index_file.hash_slot_count == 1
    index_file.close()


def test_full_file_refuses_and_empty_file_flush_writes_count_one(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "f", SLOTS, 3)
    index_file.flush()  # updateByteBuffer: the in-memory index_count 1 reaches the disk
    assert decode_header(file_bytes(index_file)) == IndexHeader(0, 0, 0, 0, 0, 1)
    assert index_file.put_key("T#a", 1, T0) and index_file.put_key("T#b", 2, T0)
    assert index_file.is_write_full
    assert not index_file.put_key("T#c", 3, T0)  # entries 1..indexNum-1 only
    assert index_file.entry_count == 2
    index_file.close()


def test_select_time_rules(tmp_path: Path) -> None:
    index_file = new_file(tmp_path)
    for i in range(3):  # the same key at T0, T0 + 10 s, T0 + 20 s
        index_file.put_key("T#k", 100 * (i + 1), T0 + 10_000 * i)
    select = index_file.select_phy_offsets
    assert select("T#k", 10, T0, T0 + 20_000) == [300, 200, 100]  # inside
    assert select("T#k", 10, T0 + 5000, T0 + 15_000) == [200]  # partial overlap
    assert select("T#k", 10, T0 + 15_000, FAR_FUTURE) == [300]  # stops below begin
    assert select("T#k", 10, T0 + 21_000, FAR_FUTURE) == []  # outside, after
    assert select("T#k", 10, 0, T0 - 1) == []  # outside, before
    assert index_file.is_time_matched(T0 - 5, T0 + 30_000)  # covers the file
    assert index_file.is_time_matched(T0 + 5, T0 + 6)  # inside the file
    assert index_file.is_time_matched(T0 - 5, T0)  # end touches begin
    assert index_file.is_time_matched(T0 + 20_000, FAR_FUTURE)  # begin touches end
    assert not index_file.is_time_matched(0, T0 - 1)
    assert not index_file.is_time_matched(T0 + 20_001, FAR_FUTURE)
    index_file.close()


def test_created_sparse_but_for_header_slots_and_a_chunk_of_entries(tmp_path: Path) -> None:
    """The blocks a put may touch are reserved before it writes through the mapping (a store into
    a hole on a full disk is SIGBUS; tests/store/test_disk_full_mapped.py), the rest stays a hole."""
    index_file = IndexFile.create(tmp_path / "big", 100_000, 1_000_000)
    size = 40 + 400_000 + 20_000_000
    assert os.stat(index_file.path).st_size == size
    chunk_entries = RESERVE_CHUNK_BYTES // 20

    def allocated() -> int:
        return os.stat(index_file.path).st_blocks * 512

    reserved = 40 + 400_000 + RESERVE_CHUNK_BYTES
    assert reserved <= allocated() <= reserved + 8192
    assert index_file.reserved_index_end == chunk_entries
    assert index_file.reserve(chunk_entries) == chunk_entries  # already there: nothing asked
    assert index_file.reserve(chunk_entries + 1) == 2 * chunk_entries  # a chunk more
    assert reserved + RESERVE_CHUNK_BYTES <= allocated() <= reserved + RESERVE_CHUNK_BYTES + 8192
    assert index_file.reserve(10_000_000) == 1_000_000  # never past the end of the file
    assert allocated() >= size
    index_file.destroy()
    assert not (tmp_path / "big").exists()


# -- IndexService ------------------------------------------------------------------------------
def test_build_and_query(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    service.build_index("T", "order-1  order-2 ", "UNIQ1", 1000, T0, 0)
    service.build_index("T", "order-1", "", 2000, T0 + 1000, SYSFLAG_COMMIT)
    service.build_index("U", "order-1", "UNIQ3", 3000, T0 + 2000, SYSFLAG_PREPARED)
    assert service.query("T", "order-1", 64, 0, FAR_FUTURE) == [2000, 1000]
    assert service.query("T", "order-2", 64, 0, FAR_FUTURE) == [1000]
    assert service.query("T", "UNIQ1", 64, 0, FAR_FUTURE) == [1000]
    assert service.query("U", "order-1", 64, 0, FAR_FUTURE) == [3000]
    assert service.query("T", "", 64, 0, FAR_FUTURE) == []  # empty tokens are not indexed
    assert service.query("T", "order-1", 64, T0 + 500, FAR_FUTURE) == [2000]
    (index_file,) = service.files
    assert index_file.name == index_file_name(T0)
    assert index_file.entry_count == 6
    # Entries in order: UNIQ_KEY first, then the keys.
    data = file_bytes(index_file)
    hashes = [decode_entry(data, entry_position(SLOTS, i))[0] for i in range(1, 4)]
    assert hashes == [index_key_hash("T#UNIQ1"), index_key_hash("T#order-1"), index_key_hash("T#order-2")]
    service.close()


def test_hash_collisions_are_returned(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    service.build_index("T", "Aa", "", 100, T0, 0)
    service.build_index("T", "BB", "", 200, T0, 0)
    assert service.query("T", "Aa", 64, 0, FAR_FUTURE) == [200, 100]  # the caller filters
    service.close()


def test_min_value_hash_maps_to_slot_zero(tmp_path: Path) -> None:
    key = key_with_java_hash("T#", 7, 0x80000000)
    assert java_string_hash("T#" + key) == -(1 << 31)
    service = new_service(tmp_path)
    service.build_index("T", key, "", 100, T0, 0)
    (index_file,) = service.files
    data = file_bytes(index_file)
    assert decode_entry(data, entry_position(SLOTS, 1))[0] == 0
    assert data[40:44] == (1).to_bytes(4, "big")  # slot 0
    assert service.query("T", key, 64, 0, FAR_FUTURE) == [100]
    service.close()


def test_rollback_not_indexed(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    service.build_index("T", "k", "U1", 100, T0, SYSFLAG_ROLLBACK)
    service.build_index("T", "k", "U1", 100, T0, SYSFLAG_ROLLBACK | 0x10)
    assert service.query("T", "k", 64, 0, FAR_FUTURE) == []
    assert service.files == () and service.max_indexed_phy_offset == -1
    service.build_index("T", "k", "", 200, T0, 0)
    service.build_index("T", "k", "", 300, T0, SYSFLAG_ROLLBACK)
    assert service.query("T", "k", 64, 0, FAR_FUTURE) == [200]
    assert service.files[0].entry_count == 1
    service.close()


def test_already_indexed_records_skipped(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    service.build_index("T", "k", "", 0, T0, 0)  # phy 0 on a fresh file is indexed
    service.build_index("T", "k", "", 0, T0, 0)  # the same record again: skipped
    service.build_index("T", "k", "", 500, T0, 0)
    service.build_index("T", "k", "", 300, T0, 0)  # below end_phy_offset: skipped
    service.build_index("T", "k", "", 500, T0, 0)
    assert service.query("T", "k", 64, 0, FAR_FUTURE) == [500, 0]
    assert service.max_indexed_phy_offset == 500
    service.close()


def test_query_max_num_capped(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    for i in range(100):
        service.build_index("T", "hot", "", i, T0, 0)
    assert len(service.query("T", "hot", 1000, 0, FAR_FUTURE)) == 64
    assert service.query("T", "hot", 3, 0, FAR_FUTURE) == [99, 98, 97]
    assert service.query("T", "hot", 0, 0, FAR_FUTURE) == []
    service.close()
    wide = IndexService(tmp_path / "index", SLOTS, ENTRIES, ManualClock(T0), query_max_num=200)
    wide.load(True, 0)
    assert len(wide.query("T", "hot", 1000, 0, FAR_FUTURE)) == 100
    wide.close()


def test_roll_presets_header_and_checkpoint_after_flush(tmp_path: Path) -> None:
    flushed: list[int] = []
    clock = ManualClock(T0)
    service = new_service(tmp_path, entries=4, clock=clock, on_index_msg_timestamp=flushed.append)
    for i in range(5):  # 3 entries per file
        service.build_index("T", f"k{i}", "", 100 * i, T0 + 1000 * i, 0)
    first, second = service.files
    assert first.is_write_full and first.entry_count == 3
    assert (first.end_phy_offset, first.end_timestamp_ms) == (200, T0 + 2000)
    assert second.entry_count == 2
    assert second.begin_phy_offset == 300 and second.begin_timestamp_ms == T0 + 3000
    # The first entry's time_diff was taken against the pre-set begin (first file's end).
    assert decode_entry(file_bytes(second), entry_position(SLOTS, 1)) == (index_key_hash("T#k3"), 300, 1, 0)
    # Same millisecond on the clock: the second name still sorts after the first.
    assert first.name == index_file_name(T0) and second.name > first.name
    assert service.last_full_end_timestamp == 0 and flushed == []
    service.flush()
    assert service.last_full_end_timestamp == T0 + 2000 and flushed == [T0 + 2000]
    service.flush()
    assert flushed == [T0 + 2000]
    assert [service.query("T", f"k{i}", 64, 0, FAR_FUTURE) for i in range(5)] == [[0], [100], [200], [300], [400]]
    service.close()


def test_roll_in_the_middle_of_a_record(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=3)  # 2 entries per file
    service.build_index("T", "a b c", "U", 100, T0, 0)
    assert [f.entry_count for f in service.files] == [2, 2]
    assert service.files[1].begin_phy_offset == 100
    for key in ("U", "a", "b", "c"):
        assert service.query("T", key, 64, 0, FAR_FUTURE) == [100]
    service.build_index("T", "a b c", "U", 100, T0, 0)  # re-dispatch: nothing added
    assert [f.entry_count for f in service.files] == [2, 2]
    service.close()


def build_records(service: IndexService, count: int, start: int = 0) -> None:
    for i in range(start, count):
        service.build_index("T", f"k{i} shared", f"U{i}", 100 * i, T0 + 1000 * i, 0)


def snapshot(service: IndexService, count: int) -> list[list[int]]:
    results = [service.query("T", f"k{i}", 64, 0, FAR_FUTURE) for i in range(count)]
    results.append(service.query("T", "shared", 64, 0, FAR_FUTURE))
    return results


def test_reload_gives_same_answers(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=10)
    build_records(service, 12)
    before = snapshot(service, 12)
    headers = [f.header() for f in service.files]
    service.close()
    reloaded = new_service(tmp_path, entries=10)
    reloaded.load(True, 0)
    assert snapshot(reloaded, 12) == before
    assert [f.header() for f in reloaded.files] == headers
    assert len(reloaded.files) == 4 and reloaded.files[-1].is_write_full
    build_records(reloaded, 14, start=12)  # rolls after the loaded, full last file
    assert reloaded.query("T", "k13", 64, 0, FAR_FUTURE) == [1300]
    assert len(reloaded.files) == 5
    assert reloaded.files[-1].begin_phy_offset == 1200
    reloaded.close()


def test_abnormal_load_deletes_files_newer_than_checkpoint(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=4)
    build_records(service, 5)  # 3 keys per record, 3 entries per file: 5 files
    service.flush()
    ends = [f.end_timestamp_ms for f in service.files]
    index_msg_timestamp = service.last_full_end_timestamp
    names = [f.name for f in service.files]
    service.close()
    assert len(names) == 5 and index_msg_timestamp == ends[-2]

    normal = new_service(tmp_path, entries=4)
    normal.load(True, 0)
    assert [f.name for f in normal.files] == names
    normal.close()

    abnormal = new_service(tmp_path, entries=4)
    abnormal.load(False, ends[1])
    assert [f.name for f in abnormal.files] == names[:2]
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == names[:2]
    assert abnormal.last_full_end_timestamp == ends[1]
    abnormal.close()


def test_load_ignores_foreign_names_and_deletes_wrong_sizes(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    (index_dir / "20231115061320500").write_bytes(b"")  # crashed before ftruncate
    (index_dir / "notes.txt").write_text("x")
    service = new_service(tmp_path)
    service.load(True, 0)
    assert service.files == ()
    assert sorted(p.name for p in index_dir.iterdir()) == ["notes.txt"]
    service.close()


def test_delete_expired_files(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=4)
    build_records(service, 5)
    ends = [f.end_phy_offset for f in service.files]
    assert ends == [0, 100, 200, 300, 400]  # one record (3 keys) per file
    assert service.delete_expired_files(0) == 0
    assert service.delete_expired_files(150) == 2
    assert [f.end_phy_offset for f in service.files] == [200, 300, 400]
    assert service.delete_expired_files(10_000) == 2  # never the last file
    assert len(service.files) == 1
    assert len(list((tmp_path / "index").iterdir())) == 1
    assert service.query("T", "k4", 64, 0, FAR_FUTURE) == [400]
    service.close()


def test_truncate_then_redispatch_is_idempotent(tmp_path: Path) -> None:
    count, cut = 30, 20
    service = new_service(tmp_path / "a", entries=7)
    build_records(service, count)
    max_indexed = service.truncate(cut * 100)  # records 20.. are gone from the CommitLog
    assert all(f.end_phy_offset < cut * 100 for f in service.files)
    assert max_indexed == service.files[-1].end_phy_offset < cut * 100
    build_records(service, cut)  # re-dispatch everything that is left, from the start
    build_records(service, cut)  # ... twice

    reference = new_service(tmp_path / "b", entries=7)
    build_records(reference, cut)
    assert snapshot(service, count) == snapshot(reference, count)
    assert snapshot(service, count)[cut:count] == [[]] * (count - cut)
    assert [file_bytes(f) for f in service.files] == [file_bytes(f) for f in reference.files]
    assert service.truncate(0) == -1 and service.files == ()
    service.close()
    reference.close()


def test_truncate_lowers_last_full_end_timestamp(tmp_path: Path) -> None:
    reported: list[int] = []
    service = new_service(tmp_path, entries=4, on_index_msg_timestamp=reported.append)
    build_records(service, 5)  # one record per file
    service.flush()
    assert reported == [T0 + 3000]  # files 0..3 rolled over and flushed
    assert service.truncate(250) == 200
    assert reported == [T0 + 3000, T0 + 2000]
    assert service.last_full_end_timestamp == T0 + 2000
    service.close()


def test_corrupt_chains_terminate(tmp_path: Path) -> None:
    index_file = IndexFile.create(tmp_path / "f", SLOTS, 4)
    for i in range(3):
        index_file.put_key("T#k", 100 * (i + 1), T0)
    first = entry_position(SLOTS, 1) + 16
    index_file._mm[first : first + 4] = (3).to_bytes(4, "big")  # 3 -> 2 -> 1 -> 3 ...
    assert index_file.select_phy_offsets("T#k", 1000, 0, FAR_FUTURE) == [300, 200, 100]
    slot = slot_position(SLOTS, index_key_hash("T#k"))
    index_file._mm[slot : slot + 4] = (4).to_bytes(4, "big")  # == index_count of a full file
    assert index_file.select_phy_offsets("T#k", 1000, 0, FAR_FUTURE) == []
    index_file.close()


def test_destroy_removes_everything(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=4)
    build_records(service, 3)
    service.destroy()
    assert list((tmp_path / "index").iterdir()) == []
    assert service.query("T", "k1", 64, 0, FAR_FUTURE) == []


def test_queries_run_concurrently_with_puts_and_deletes(tmp_path: Path) -> None:
    service = new_service(tmp_path, entries=50)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                for phy in service.query("T", "shared", 64, 0, FAR_FUTURE):
                    assert phy % 100 == 0
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for i in range(600):
        service.build_index("T", f"k{i} shared", f"U{i}", 100 * i, T0 + 1000 * i, 0)
        if i % 50 == 0:
            service.delete_expired_files(100 * (i - 100))
    done.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert service.query("T", "shared", 64, 0, FAR_FUTURE)[:3] == [59900, 59800, 59700]
    service.close()


# -- build_index_batch: byte-identical to one build_index per record -------------------------
