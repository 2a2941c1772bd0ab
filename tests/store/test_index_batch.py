"""IndexService.build_index_batch: byte-identical to per-record build_index, on every path."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.format.index_format import (
    IndexHeader,
    decode_header,
    index_key,
    index_key_hash,
    index_key_hashes,
)
from services.domain.format.java_compat import java_string_hash
from services.runtime.clock import ManualClock
from services.store.index import index_file as index_file_module
from services.store.index.service import IndexService
from services.store.model import DispatchRequest
from tests.support.index_files import (
    FAR_FUTURE,
    SLOTS,
    SYSFLAG_COMMIT,
    SYSFLAG_PREPARED,
    SYSFLAG_ROLLBACK,
    T0,
    file_bytes,
    new_service,
)


def reference_build_index(
    service: IndexService, topic: str, keys: str, uniq_key: str, phy_offset: int, store_timestamp_ms: int, sys_flag: int
) -> None:
    """build_index as it was before build_index_batch: one IndexFile.put_key_hash per key and
    the slow, independent key hash (java_string_hash)."""
    with service._lock:
        files = service._files
        index_file = files[-1] if files else None
        partial = False
        if index_file is not None:
            end_phy_offset = index_file.end_phy_offset
            if phy_offset < end_phy_offset:
                return
            partial = phy_offset == end_phy_offset and (end_phy_offset > 0 or index_file.index_count > 1)
        if sys_flag & 0xC == SYSFLAG_ROLLBACK:
            return
        for key in (uniq_key, *keys.split(" ")) if keys else (uniq_key,):
            if not key:
                continue
            key_hash = index_key_hash(index_key(topic, key))
            if partial and service._has_entry_locked(key_hash, phy_offset):
                continue
            if index_file is None or not index_file.put_key_hash(key_hash, phy_offset, store_timestamp_ms):
                index_file = service._roll_locked()
                assert index_file.put_key_hash(key_hash, phy_offset, store_timestamp_ms)


def request(
    topic: str, keys: str, uniq_key: str, phy_offset: int, store_timestamp_ms: int, sys_flag: int = 0
) -> DispatchRequest:
    return DispatchRequest(
        topic=topic,
        queue_id=0,
        phy_offset=phy_offset,
        size=100,
        tags_code=0,
        store_timestamp_ms=store_timestamp_ms,
        queue_offset=0,
        keys=keys,
        uniq_key=uniq_key,
        sys_flag=sys_flag,
        prepared_transaction_offset=0,
    )


KEY_POOL = [
    "k",
    "order-1",
    "order-2",
    "A" * 40,
    "é",
    "中文",
    "\U0001f600x",
    "x" * 300,
    "polygenelubricants",
    "a\x01b",
    "Aa",
    "BB",
    "00FF",
    "k k",
    "λ" * 5,
]
TOPIC_POOL = ["T", "TopicB", "主题", "%RETRY%g"]


def random_requests(rnd, count: int, redispatch: float) -> list[DispatchRequest]:
    """Increasing phy offsets, with re-dispatch of single records and of ranges (with
    probability ``redispatch`` per record), ROLLBACK/PREPARED/COMMIT, empty, duplicate and
    non-ASCII keys, stepping timestamps."""
    made: list[DispatchRequest] = []
    phy, ts = rnd.choice([0, 0, 64]), rnd.choice([0, T0])
    while len(made) < count:
        roll = rnd.random()
        if made and roll < redispatch / 2:
            made.append(made[-1])  # the same record again
            continue
        if len(made) > 3 and roll < redispatch:
            start = rnd.randrange(len(made))
            made.extend(made[start : start + rnd.randint(1, 6)])  # a range again
            continue
        keys = " ".join(rnd.choice(KEY_POOL + [""]) for _ in range(rnd.choice([0, 1, 1, 2, 3])))
        if rnd.random() < 0.1:
            keys = " " + keys + "  "
        uniq = rnd.choice(["", f"{rnd.getrandbits(128):032X}", f"{rnd.getrandbits(128):032X}", "U", "u n", "é"])
        sys_flag = rnd.choice([0, 0, 0, 0, SYSFLAG_PREPARED, SYSFLAG_COMMIT, SYSFLAG_ROLLBACK])
        made.append(request(rnd.choice(TOPIC_POOL), keys, uniq, phy, ts, sys_flag))
        phy += rnd.choice([1, 37, 100, 1000])
        ts += rnd.choice([0, 1, 999, 1000, 1001, 60_000, -2000])
    return made


def index_state(service: IndexService) -> list[tuple[str, bytes, IndexHeader]]:
    return [(f.name, file_bytes(f), f.header()) for f in service.files]


def assert_same_index(a: IndexService, b: IndexService, requests: list[DispatchRequest]) -> None:
    assert index_state(a) == index_state(b)
    assert a.max_indexed_phy_offset == b.max_indexed_phy_offset
    for topic, key in {(r.topic, k) for r in requests for k in (r.uniq_key, *r.keys.split(" ")) if k}:
        assert a.query(topic, key, 64, 0, FAR_FUTURE) == b.query(topic, key, 64, 0, FAR_FUTURE)


@pytest.mark.parametrize("slots,entries", [(7, 5), (16, 13), (100, 400)])
@pytest.mark.parametrize("seed", range(4))  # make soak: 40 more
def test_batch_is_byte_identical_to_per_record(tmp_path: Path, seed: int, slots: int, entries: int) -> None:
    batch_is_byte_identical_to_per_record(tmp_path, seed, slots, entries)


@pytest.mark.slow
@pytest.mark.parametrize("slots,entries", [(7, 5), (16, 13), (100, 400)])
@pytest.mark.parametrize("seed", range(4, 44))
def test_batch_is_byte_identical_to_per_record_on_more_seeds(
    tmp_path: Path, seed: int, slots: int, entries: int
) -> None:
    batch_is_byte_identical_to_per_record(tmp_path, seed, slots, entries)


def batch_is_byte_identical_to_per_record(tmp_path: Path, seed: int, slots: int, entries: int) -> None:
    rnd = random.Random(seed * 1000 + slots)
    # Odd seeds re-dispatch (mostly the record-by-record loop), even ones rarely (numpy).
    requests = random_requests(rnd, 400, 0.08 if seed % 2 else 0.002)
    clock = ManualClock(T0)
    services = [IndexService(tmp_path / name, slots, entries, clock) for name in ("ref", "one", "batch")]
    reference, one, batch = services
    threshold = index_file_module._NP_MIN_RECORDS  # batches on both sides of it
    done = 0
    while done < len(requests):
        size = rnd.choice([1, 2, 5, threshold - 1, threshold, 40, 100, 250])
        chunk = requests[done : done + size]
        for r in chunk:
            reference_build_index(
                reference, r.topic, r.keys, r.uniq_key, r.phy_offset, r.store_timestamp_ms, r.sys_flag
            )
            one.build_index(r.topic, r.keys, r.uniq_key, r.phy_offset, r.store_timestamp_ms, r.sys_flag)
        batch.build_index_batch(chunk)
        done += len(chunk)
        assert index_state(batch) == index_state(reference)  # at every batch boundary
        clock.advance_ms(rnd.choice([0, 1, 1000]))
    assert_same_index(reference, batch, requests)
    assert_same_index(reference, one, requests)
    assert len(reference.files) > 1 or entries == 400
    for service in services:
        service.flush()
    assert index_state(batch) == index_state(reference)
    for service in services:
        service.close()


def test_batch_numpy_path_matches_on_a_long_increasing_stream(tmp_path: Path) -> None:
    """The vectorised put: big batches, rolls inside a batch and inside a record, slots that
    repeat within a run, a file's first entry in the middle of a batch."""
    rnd = random.Random(7)
    requests = [
        request(
            "T" if i % 3 else "主题",
            f"order-{i % 500} shared" if i % 7 else "",
            f"{rnd.getrandbits(128):032X}" if i % 11 else "",
            1000 + 97 * i,
            T0 + 700 * i,
            SYSFLAG_ROLLBACK if i % 50 == 0 else 0,
        )
        for i in range(6000)
    ]
    reference = IndexService(tmp_path / "ref", 1021, 3001, ManualClock(T0))
    batch = IndexService(tmp_path / "batch", 1021, 3001, ManualClock(T0))
    for r in requests:
        reference_build_index(reference, r.topic, r.keys, r.uniq_key, r.phy_offset, r.store_timestamp_ms, r.sys_flag)
    for start in range(0, len(requests), 1500):
        batch.build_index_batch(requests[start : start + 1500])
    assert len(reference.files) > 3
    assert_same_index(reference, batch, requests[:300] + requests[-300:])
    # Re-dispatching everything changes nothing.
    batch.build_index_batch(requests)
    batch.build_index_batch(requests[-100:])
    assert index_state(batch) == index_state(reference)
    reference.close()
    batch.close()


def test_batch_uses_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    service = new_service(tmp_path)
    real_np = service._build_batch_np
    real_py = service._build_batch_py_locked
    monkeypatch.setattr(service, "_build_batch_np", lambda reqs: calls.append("np") or real_np(reqs))
    monkeypatch.setattr(service, "_build_batch_py_locked", lambda reqs: calls.append("py") or real_py(reqs))
    many = index_file_module._NP_MIN_RECORDS
    service.build_index_batch([request("T", f"k{i}", "", 100 + i, T0) for i in range(many)])
    assert calls == ["np"]
    calls.clear()
    service.build_index_batch([request("T", f"k{i}", "", 200 + i, T0) for i in range(many - 1)])
    assert calls == ["py"]
    calls.clear()
    # A re-dispatched batch falls back to the record-by-record loop (the skip rules).
    service.build_index_batch([request("T", f"k{i}", "", 100 + i, T0) for i in range(many)])
    assert calls == ["np", "py"]
    assert service.files[-1].entry_count == 2 * many - 1
    service.close()


def test_batch_publishes_header_once_and_queries_see_it(tmp_path: Path) -> None:
    service = new_service(tmp_path)
    service.build_index_batch(
        [
            request("T", "a b", "U1", 100, T0),
            request("T", "a", "", 200, T0 + 5000),
            request("T", "", "", 300, T0 + 9000),
        ]
    )  # no keys: no-op
    (index_file,) = service.files
    assert decode_header(file_bytes(index_file)) == IndexHeader(T0, T0 + 5000, 100, 200, 3, 5)
    assert index_file.header() == IndexHeader(T0, T0 + 5000, 100, 200, 3, 5)
    assert service.query("T", "a", 64, 0, FAR_FUTURE) == [200, 100]
    assert service.max_indexed_phy_offset == 200
    service.build_index_batch([])
    service.build_index_batch([request("T", "", "", 400, T0)])
    assert decode_header(file_bytes(index_file)).index_count == 5
    service.close()


def test_batch_on_a_loaded_empty_file_writes_nothing(tmp_path: Path) -> None:
    """A file with index_count 0 on disk (crash right after a roll) keeps its bytes when a
    batch puts nothing in it; a flush would write index_count 1."""
    service = new_service(tmp_path, entries=3)
    service.build_index("T", "a b", "", 100, T0, 0)  # fills the file
    with service._lock:
        service._roll_locked()
    names = [f.name for f in service.files]
    for index_file in service.files:
        index_file.close()  # no flush: the new file keeps index_count 0 on disk
    reloaded = new_service(tmp_path, entries=3)
    reloaded.load(True, 0)
    on_disk = [p.read_bytes() for p in sorted((tmp_path / "index").iterdir())]
    assert decode_header(on_disk[-1]).index_count == 0
    for requests in ([request("T", "a", "", 50, T0)] * 30, [request("T", "a", "", 50, T0)]):
        reloaded.build_index_batch(requests)  # below end_phy_offset: skipped
        assert [p.read_bytes() for p in sorted((tmp_path / "index").iterdir())] == on_disk
    assert [f.name for f in reloaded.files] == names
    reloaded.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=3), st.text(max_size=12)), min_size=1, max_size=80))
def test_vectorised_hashes_equal_java_hash(pairs: list[tuple[str, str]]) -> None:
    try:
        expected = [index_key_hash(prefix + key) for prefix, key in pairs]
    except UnicodeEncodeError:  # lone surrogates: not a Java string we can encode either
        return
    prefixes = [java_string_hash(prefix) & 0xFFFFFFFF for prefix, _ in pairs]
    assert index_key_hashes(prefixes, [key for _, key in pairs]).tolist() == expected


@pytest.mark.parametrize(
    "timestamps",
    [
        [T0 + 10_000, T0, T0 + 9_999, T0 + 10_000, T0 + 11_000, T0 + 12_500, -5, 0] * 5,
        [0, 0, T0, T0 + 1000, T0 - 1000] * 8,
        [-3000, 5000, 4000, 1 << 62, 7000] * 8,  # begin <= 0, then a time_diff past Java's int
    ],
)
def test_batch_time_diffs_match(tmp_path: Path, timestamps: list[int]) -> None:
    requests = [request("T", f"k{i % 3}", f"U{i}", 100 * (i + 1), ts) for i, ts in enumerate(timestamps)]
    reference = IndexService(tmp_path / "ref", SLOTS, 17, ManualClock(T0))  # rolls every 8 records
    batch = IndexService(tmp_path / "batch", SLOTS, 17, ManualClock(T0))
    for r in requests:
        reference_build_index(reference, r.topic, r.keys, r.uniq_key, r.phy_offset, r.store_timestamp_ms, r.sys_flag)
    batch.build_index_batch(requests)
    assert index_state(batch) == index_state(reference)
    reference.close()
    batch.close()


@pytest.mark.parametrize("batch_size", [5, 200])  # the record-by-record loop, numpy
def test_queries_never_lose_older_keys_during_a_batch(tmp_path: Path, batch_size: int) -> None:
    service = IndexService(tmp_path / "index", 10, 100_000, ManualClock(T0))  # every slot hot
    service.build_index_batch([request("T", f"old{k}", "", 100 + k, T0) for k in range(20)])
    errors: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            for k in range(20):
                found = service.query("T", f"old{k}", 64, 0, FAR_FUTURE)
                if found != [100 + k]:
                    errors.append(f"old{k}: {found}")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    phy = 1000
    try:
        for _ in range(12_000 // batch_size):
            service.build_index_batch(
                [request("T", f"new{phy + i}", f"U{phy + i}", phy + i, T0) for i in range(batch_size)]
            )
            phy += batch_size
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == []
    service.close()
