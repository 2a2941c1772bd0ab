"""Retention (docs/store-files.md, section 7; docs/durability.md, "disk full"): CleanService.run_once
deletes old CommitLog segments oldest first, never the last one and never leaving a hole,
deletes every segment when the disk is nearly full, refuses writes above the warning ratio,
and moves the ConsumeQueue and IndexFile minimums forward after it.

Ages come from file mtimes (set with os.utime) against the store's ManualClock; disk usage is
injected through ``store.clean.disk_usage``. Nothing sleeps: each pass is one run_once call.
"""

from __future__ import annotations

import os

import pytest

from services.domain.statuses import GetStatus, PutStatus
from services.store.log import commitlog as commitlog_module
from services.store.store import FileStore
from tests.support.filestore import message, small_config

HOUR_MS = 3_600_000
RESERVED_HOURS = 72
EXPIRED_H = RESERVED_HOURS + 1
FRESH_H = 0
BODY_SIZE_BYTES = 3000  # about 20 records per 64 KiB segment
LOW_USAGE = 0.10

# The background clean loop never fires during a test (run_once is called by hand).
RETENTION = dict(clean_resource_interval_ms=3_600_000, file_reserved_time_hours=RESERVED_HOURS)


def body_of(i: int) -> bytes:
    return b"%06d-" % i + bytes([i % 251]) * BODY_SIZE_BYTES


def fill(store: FileStore, count: int, queue_count: int = 1) -> list:
    """Put ``count`` messages round-robin over ``queue_count`` queues, each with key k<i>."""
    results = []
    for i in range(count):
        [r] = store.put_messages([message(queue_id=i % queue_count, body=body_of(i), keys=f"k{i}")])
        assert r.status is PutStatus.PUT_OK, r
        results.append(r)
    store.reput.run_once()
    return results


def set_ages(store: FileStore, clock, ages_hours: list[float]) -> None:
    """Give CommitLog segment i an mtime ages_hours[i] hours before the store clock's now."""
    files = store.commitlog.mfq.files
    assert len(files) == len(ages_hours), (len(files), ages_hours)
    for mf, age_h in zip(files, ages_hours):
        t_s = (clock.now_ms() - age_h * HOUR_MS) / 1000
        os.utime(mf.path, (t_s, t_s))


def segment_names(store: FileStore) -> list[str]:
    return [mf.path.name for mf in store.commitlog.mfq.files]


def on_disk(store: FileStore) -> list[str]:
    return sorted(p.name for p in store.config.commitlog_dir.iterdir())


@pytest.fixture
def retained(make_store):
    """A store with retention by hand and a quiet disk."""

    def make(**overrides) -> FileStore:
        store = make_store(**RETENTION, **overrides)
        store.clean.disk_usage = lambda: LOW_USAGE
        return store

    return make


def test_expired_segments_go_oldest_first_and_deletion_stops_at_the_first_kept_one(retained, clock):
    store = retained()
    fill(store, 100)
    names = segment_names(store)
    assert len(names) == 5, names
    # Old, old, fresh, old, old(last): only the first two may go: no holes, never the last.
    set_ages(store, clock, [EXPIRED_H, EXPIRED_H, FRESH_H, EXPIRED_H, EXPIRED_H])
    assert store.clean.run_once() == 2
    assert segment_names(store) == names[2:] == on_disk(store)
    assert store.commitlog.min_offset == int(names[2])
    assert store.clean.run_once() == 0  # the fresh one still blocks the rest

    clock.advance_ms(EXPIRED_H * HOUR_MS)  # now every file is expired, the last one included
    assert store.clean.run_once() == 2
    assert segment_names(store) == names[4:] == on_disk(store)
    assert store.clean.run_once() == 0  # never the last file
    assert store.clean.deleted_files_total == 4
    assert not store.clean.disk_full


def test_a_segment_exactly_at_the_reserved_time_is_expired(retained, clock):
    store = retained()
    fill(store, 45)
    assert len(segment_names(store)) == 3
    set_ages(store, clock, [RESERVED_HOURS, RESERVED_HOURS - 0.01, FRESH_H])
    assert store.clean.run_once() == 1  # now >= mtime + reserved


def test_deletions_per_pass_are_capped_by_delete_file_batch_max(retained, clock):
    store = retained(delete_file_batch_max=2)
    fill(store, 100)
    names = segment_names(store)
    set_ages(store, clock, [EXPIRED_H] * len(names))
    assert store.clean.run_once() == 2
    assert store.clean.run_once() == 2
    assert store.clean.run_once() == 0
    assert segment_names(store) == names[-1:]


def test_above_the_clean_forcibly_ratio_unexpired_segments_are_deleted(retained, clock):
    store = retained()
    fill(store, 100)
    names = segment_names(store)
    set_ages(store, clock, [FRESH_H] * len(names))
    assert store.clean.run_once() == 0
    store.clean.disk_usage = lambda: 0.80  # above disk_max_used_space_ratio only: age still rules
    assert store.clean.run_once() == 0
    store.clean.disk_usage = lambda: 0.88  # above disk_space_clean_forcibly_ratio (0.85)
    assert store.clean.run_once() == 4
    assert segment_names(store) == names[-1:] == on_disk(store)
    assert not store.clean.disk_full  # below the warning ratio: writes go on
    assert store.put_messages([message(body=b"after")])[0].status is PutStatus.PUT_OK


def test_above_the_warning_ratio_puts_are_refused_until_usage_drops(retained, clock):
    store = retained()
    fill(store, 10, queue_count=2)
    store.clean.disk_usage = lambda: 0.90  # the ratio itself is not above it
    store.clean.run_once()
    assert not store.clean.disk_full
    assert store.put_messages([message(body=b"at the ratio")])[0].status is PutStatus.PUT_OK

    store.clean.disk_usage = lambda: 0.95
    store.clean.run_once()
    assert store.clean.disk_full
    store.reput.run_once()
    before = (store.commitlog.max_offset, store.commitlog.put_messages_total, store.max_offset_in_queue("TopicTest", 0))
    refused = store.put_messages([message(body=b"refused-%d" % i) for i in range(3)])
    assert [r.status for r in refused] == [PutStatus.SERVICE_NOT_AVAILABLE] * 3
    assert all(r.phy_offset == -1 and r.queue_offset == -1 for r in refused)
    store.reput.run_once()
    assert (
        store.commitlog.max_offset,
        store.commitlog.put_messages_total,
        store.max_offset_in_queue("TopicTest", 0),
    ) == before  # nothing written
    store.clean.run_once()  # still full: still refused
    assert store.put_messages([message()])[0].status is PutStatus.SERVICE_NOT_AVAILABLE

    store.clean.disk_usage = lambda: 0.50
    store.clean.run_once()
    assert not store.clean.disk_full
    [resumed] = store.put_messages([message(body=b"resumed")])
    assert resumed.status is PutStatus.PUT_OK
    assert resumed.queue_offset == before[2]  # dense: the refused puts took no offsets
    store.reput.run_once()
    got = store.get_messages("TopicTest", 0, 0, max_count=100, max_bytes=1 << 30)
    assert [m.body for m in got.messages] == [body_of(i) for i in range(0, 10, 2)] + [b"at the ratio", b"resumed"]


def test_refresh_disk_full_judges_between_passes_without_deleting(retained, clock):
    """What a replica publishes to its group for elections (services/store/ha/controller_mode.py):
    the same mark as the puts', read now rather than at the last retention pass."""
    store = retained()
    fill(store, 10)
    set_ages(store, clock, [100.0] * len(segment_names(store)))  # expired: a pass would delete
    kept = on_disk(store)
    store.clean.disk_usage = lambda: 0.95
    assert store.clean.refresh_disk_full() is True
    assert store.put_messages([message()])[0].status is PutStatus.SERVICE_NOT_AVAILABLE
    store.clean.disk_usage = lambda: 0.50
    assert store.clean.refresh_disk_full() is False
    assert on_disk(store) == kept  # judged only: no segment deleted
    assert store.put_messages([message()])[0].status is PutStatus.PUT_OK


def test_consume_queue_min_offsets_move_forward_and_remaining_messages_read(retained, clock):
    store = retained(consume_queue_units_per_file=8)
    results = fill(store, 100, queue_count=2)
    names = segment_names(store)
    cq_files_before = {q: len(store.cq_store.find("TopicTest", q).mfq.files) for q in (0, 1)}
    set_ages(store, clock, [EXPIRED_H, EXPIRED_H, EXPIRED_H, FRESH_H, FRESH_H])
    assert store.clean.run_once() == 3
    new_min_phy = store.commitlog.min_offset
    assert new_min_phy == int(names[3])

    for q in (0, 1):
        mine = [(i, r) for i, r in enumerate(results) if i % 2 == q]
        survivors = [(i, r) for i, r in mine if r.phy_offset >= new_min_phy]
        expected_min = survivors[0][1].queue_offset
        assert expected_min > 0
        assert store.min_offset_in_queue("TopicTest", q) == expected_min
        assert store.max_offset_in_queue("TopicTest", q) == len(mine)
        too_small = store.get_messages("TopicTest", q, 0)
        assert too_small.status is GetStatus.OFFSET_TOO_SMALL
        assert too_small.next_begin_offset == expected_min and too_small.min_offset == expected_min
        got = store.get_messages("TopicTest", q, expected_min, max_count=1000, max_bytes=1 << 30)
        assert got.status is GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == list(range(expected_min, len(mine)))
        assert [m.body for m in got.messages] == [body_of(i) for i, _ in survivors]
        assert [m.phy_offset for m in got.messages] == [r.phy_offset for _, r in survivors]
        # ConsumeQueue files that only pointed into deleted segments are gone.
        cq = store.cq_store.find("TopicTest", q)
        assert len(cq.mfq.files) < cq_files_before[q]
        assert len(cq.mfq.files) == len(list(cq.mfq.directory.iterdir()))

    # Lookups into deleted segments find nothing; into kept ones, the record.
    assert store.look_message_by_phy_offset(results[0].phy_offset) is None
    assert store.look_message_by_phy_offset(results[-1].phy_offset).body == body_of(99)
    # New puts continue the queues.
    [r] = store.put_messages([message(queue_id=0, body=b"new")])
    assert r.queue_offset == 50


def test_index_files_wholly_below_the_new_min_are_deleted(retained, clock):
    store = retained(index_hash_slot_num=8, index_num_max=16)  # 15 keys per index file
    results = fill(store, 100)
    index_files = list(store.index_service.files)
    assert len(index_files) >= 6
    set_ages(store, clock, [EXPIRED_H, EXPIRED_H, EXPIRED_H, FRESH_H, FRESH_H])
    assert store.clean.run_once() == 3
    new_min_phy = store.commitlog.min_offset

    kept = list(store.index_service.files)
    expect_kept = [f for f in index_files if f.end_phy_offset >= new_min_phy]
    assert [f.name for f in kept] == [f.name for f in expect_kept]
    assert len(kept) < len(index_files)
    assert sorted(p.name for p in store.config.index_dir.iterdir()) == [f.name for f in kept]
    assert all(f.closed for f in index_files if f not in expect_kept)

    found = store.query_messages_by_key("TopicTest", "k99", 10, 0, 1 << 62)
    assert [m.body for m in found] == [body_of(99)]
    first_kept = next(i for i, r in enumerate(results) if r.phy_offset >= new_min_phy)
    found = store.query_messages_by_key("TopicTest", f"k{first_kept}", 10, 0, 1 << 62)
    assert [m.phy_offset for m in found] == [results[first_kept].phy_offset]
    assert store.query_messages_by_key("TopicTest", "k0", 10, 0, 1 << 62) == []


@pytest.mark.parametrize("stop", ["shutdown", "halt"])
def test_a_restart_after_deletion_keeps_min_and_max_offsets(tmp_path, clock, stop):
    config = small_config(tmp_path / "store", consume_queue_units_per_file=8, **RETENTION)
    store = FileStore(config, clock)
    store.start()
    try:
        store.clean.disk_usage = lambda: LOW_USAGE
        # Queue 3 only has messages in the first segment: retention empties it entirely.
        early = [store.put_messages([message(queue_id=3, body=b"early-%d" % i)])[0] for i in range(10)]
        fill(store, 100, queue_count=3)
        set_ages(store, clock, [EXPIRED_H, EXPIRED_H, FRESH_H, FRESH_H, FRESH_H])
        assert store.clean.run_once() == 2
        assert early[-1].phy_offset < store.commitlog.min_offset
        before = {
            "commitlog": (store.commitlog.min_offset, store.commitlog.max_offset),
            "queues": {
                q: (store.min_offset_in_queue("TopicTest", q), store.max_offset_in_queue("TopicTest", q))
                for q in range(4)
            },
        }
        assert all(lo > 0 for lo, _ in before["queues"].values())
        assert before["queues"][3] == (10, 10)
    finally:
        getattr(store, stop)()

    store = FileStore(config, clock)
    store.start()
    try:
        after = {
            "commitlog": (store.commitlog.min_offset, store.commitlog.max_offset),
            "queues": {
                q: (store.min_offset_in_queue("TopicTest", q), store.max_offset_in_queue("TopicTest", q))
                for q in range(4)
            },
        }
        assert after == before
        assert store.get_messages("TopicTest", 3, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
        for q in range(3):
            lo, hi = after["queues"][q]
            too_small = store.get_messages("TopicTest", q, 0)
            assert too_small.status is GetStatus.OFFSET_TOO_SMALL and too_small.next_begin_offset == lo
            got = store.get_messages("TopicTest", q, lo, max_count=1000, max_bytes=1 << 30)
            assert [m.queue_offset for m in got.messages] == list(range(lo, hi))
            assert all(m.body == body_of(int(m.body[:6])) for m in got.messages)
        [r] = store.put_messages([message(queue_id=0, body=b"after restart")])
        assert r.status is PutStatus.PUT_OK and r.queue_offset == before["queues"][0][1]
    finally:
        store.shutdown()


def test_retention_of_undispatched_segments_does_not_stall_dispatch(retained, clock, monkeypatch):
    # As after a dispatch backlog overflow: the put path records nothing, reput parses the log.
    monkeypatch.setattr(commitlog_module, "DISPATCH_BACKLOG_MAX", 0)
    store = retained()
    store.reput.stop()  # dispatch lags behind the puts
    results = [store.put_messages([message(body=body_of(i))])[0] for i in range(100)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert len(segment_names(store)) == 5
    store.clean.disk_usage = lambda: 0.88
    assert store.clean.run_once() == 4
    [new] = store.put_messages([message(body=b"new")])
    assert new.status is PutStatus.PUT_OK and new.queue_offset == 100

    store.reput.run_once()
    assert store.reput.reput_from_offset == store.commitlog.max_offset
    survivors = [(i, r) for i, r in enumerate(results) if r.phy_offset >= store.commitlog.min_offset]
    first = survivors[0][1].queue_offset
    assert store.max_offset_in_queue("TopicTest", 0) == 101
    assert store.min_offset_in_queue("TopicTest", 0) == first
    got = store.get_messages("TopicTest", 0, first, max_count=1000, max_bytes=1 << 30)
    assert [m.queue_offset for m in got.messages] == list(range(first, 101))
    assert [m.body for m in got.messages] == [body_of(i) for i, _ in survivors] + [b"new"]
