"""Crash recovery: torn tails at every byte, bit flips, damaged data followed by valid data,
derived files lost or damaged. A crash is FileStore.halt(): threads stop, nothing is flushed or
checkpointed and the abort file stays, like kill -9 (the page cache keeps what was written)."""

from __future__ import annotations

import shutil

import pytest

from services.domain.statuses import GetStatus
from services.store.errors import CommitLogCorruptError
from services.store.log.checkpoint import CheckpointFile
from services.store.store import FileStore
from tests.support.filestore import message, small_config

SLOW_CHECKPOINT = dict(flush_consume_queue_interval_ms=3_600_000, flush_interval_ms=3_600_000)


def bodies(store, topic="TopicTest", queue_id=0):
    store.reput.run_once()
    got = store.get_messages(topic, queue_id, 0, max_count=10_000, max_bytes=1 << 30)
    return [m.body for m in got.messages] if got.status is GetStatus.FOUND else []


def crashed_store(root, clock, count=6, **overrides):
    store = FileStore(small_config(root, **SLOW_CHECKPOINT, **overrides), clock)
    store.start()
    results = store.put_messages([message(body=b"body-%03d" % i, keys=f"k{i}") for i in range(count)])
    store.reput.run_once()  # dispatched, but no checkpoint records it
    store.halt()
    assert (root / "abort").exists()
    return results


def start(root, clock, **overrides) -> FileStore:
    store = FileStore(small_config(root, **SLOW_CHECKPOINT, **overrides), clock)
    store.start()
    return store


def test_crash_loses_nothing_that_was_written(tmp_path, clock):
    crashed_store(tmp_path / "s", clock)
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(6)]
        assert store.put_messages([message()])[0].queue_offset == 6
        assert len(store.query_messages_by_key("TopicTest", "k3", 10, 0, 1 << 62)) == 1
    finally:
        store.shutdown()


def test_torn_tail_at_every_byte_of_the_last_two_records(tmp_path, clock):
    results = crashed_store(tmp_path / "base", clock)
    segment = tmp_path / "base" / "commitlog" / f"{0:020d}"
    first_cut = results[-2].phy_offset
    end = results[-1].phy_offset + results[-1].wrote_bytes
    for cut in range(first_cut, end):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "base", root)
        data = bytearray((root / "commitlog" / segment.name).read_bytes())
        data[cut:end] = bytes(end - cut)  # the write stopped at byte `cut`
        (root / "commitlog" / segment.name).write_bytes(data)
        store = start(root, clock)
        try:
            complete = sum(1 for r in results if r.phy_offset + r.wrote_bytes <= cut)
            assert bodies(store) == [b"body-%03d" % i for i in range(complete)], cut
            assert store.commitlog.max_offset == results[complete].phy_offset if complete < 6 else end
            [again] = store.put_messages([message(body=b"after")])
            assert again.queue_offset == complete and again.phy_offset == store.commitlog.max_offset - again.wrote_bytes
        finally:
            store.shutdown()
        shutil.rmtree(root)


def test_garbage_tail_is_truncated_and_never_served(tmp_path, clock):
    results = crashed_store(tmp_path / "s", clock)
    path = tmp_path / "s" / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    last = results[-1]
    data[last.phy_offset + 20 : last.phy_offset + 40] = b"\xff" * 20  # torn inside the last record
    path.write_bytes(data)
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(5)]
        assert store.recovery.truncated_tail
    finally:
        store.shutdown()


def _write_checkpoint(root, dispatched, flushed):
    cp = CheckpointFile(root / "checkpoint")
    cp.current.dispatched_phy_offset = dispatched
    cp.current.flushed_phy_offset = flushed
    cp.save()
    cp.close()


def test_damaged_durable_record_followed_by_valid_ones_refuses_to_start(tmp_path, clock):
    results = crashed_store(tmp_path / "s", clock)
    end = results[-1].phy_offset + results[-1].wrote_bytes
    _write_checkpoint(tmp_path / "s", 0, end)  # all of it was flushed (acknowledged)
    path = tmp_path / "s" / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    victim = results[2]
    data[victim.phy_offset + victim.wrote_bytes - 30] ^= 0x01  # inside the body: CRC fails
    path.write_bytes(data)
    with pytest.raises(CommitLogCorruptError) as info:
        start(tmp_path / "s", clock)
    assert info.value.phy_offset == victim.phy_offset
    assert info.value.next_valid_offset == results[3].phy_offset
    assert str(victim.phy_offset) in str(info.value)
    # The operator may choose to drop everything from the damage on.
    store = start(tmp_path / "s", clock, allow_truncate_corrupt=True)
    try:
        assert bodies(store) == [b"body-000", b"body-001"]
    finally:
        store.shutdown()


def test_damage_in_the_unflushed_window_is_a_torn_tail(tmp_path, clock):
    results = crashed_store(tmp_path / "s", clock)
    _write_checkpoint(tmp_path / "s", 0, results[2].phy_offset)  # flushed only up to record 2
    path = tmp_path / "s" / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[results[3].phy_offset + 60] ^= 0x10  # power loss: record 3 lost, 4 and 5 written back
    path.write_bytes(data)
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(3)]
        [r] = store.put_messages([message(body=b"new")])
        assert r.queue_offset == 3
        store.shutdown()
        store = start(tmp_path / "s", clock)  # the stale records 4, 5 were zeroed, never resurrected
        assert bodies(store) == [b"body-000", b"body-001", b"body-002", b"new"]
    finally:
        store.shutdown()


def test_lost_consume_queue_and_index_are_rebuilt(tmp_path, clock):
    crashed_store(tmp_path / "s", clock, count=40)
    shutil.rmtree(tmp_path / "s" / "consumequeue")
    shutil.rmtree(tmp_path / "s" / "index")
    (tmp_path / "s" / "checkpoint").unlink()
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(40)]
        assert len(store.query_messages_by_key("TopicTest", "k39", 10, 0, 1 << 62)) == 1
    finally:
        store.shutdown()


def test_consume_queue_disagreeing_with_commitlog_is_rebuilt(tmp_path, clock):
    results = crashed_store(tmp_path / "s", clock, count=10)
    end = results[-1].phy_offset + results[-1].wrote_bytes
    _write_checkpoint(tmp_path / "s", end, end)  # claims everything is dispatched
    cq_file = tmp_path / "s" / "consumequeue" / "TopicTest" / "0" / f"{0:020d}"
    data = bytearray(cq_file.read_bytes())
    data[9 * 20 : 9 * 20 + 8] = (results[4].phy_offset).to_bytes(8, "big")  # last unit points elsewhere
    cq_file.write_bytes(data)
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(10)]
    finally:
        store.shutdown()


def test_clean_shutdown_needs_no_scan(tmp_path, clock):
    store = start(tmp_path / "s", clock)
    store.put_messages([message() for _ in range(100)])
    end = store.commitlog.max_offset
    store.shutdown()
    store = start(tmp_path / "s", clock)
    try:
        assert store.recovery.scanned_bytes == 0 and store.recovery.process_offset == end
    finally:
        store.shutdown()


@pytest.mark.parametrize("victim", ["checkpoint", "index", "consumequeue"])
@pytest.mark.parametrize("seed", range(4))
def test_bit_flips_in_derived_files_are_repaired_from_the_commitlog(tmp_path, clock, victim, seed):
    """docs/durability.md, T1.5: flip bits in a random 4 KiB chunk of the checkpoint, an IndexFile or a
    ConsumeQueue after a crash; the store still serves every message, in order and intact (the
    CommitLog is the truth; a derived file that disagrees is rebuilt from it)."""
    import random

    rng = random.Random(seed)
    crashed_store(tmp_path / "s", clock, count=40)
    files = (
        sorted(p for p in (tmp_path / "s" / victim).rglob("*") if p.is_file())
        if victim != "checkpoint"
        else [tmp_path / "s" / "checkpoint"]
    )
    path = rng.choice(files)
    data = bytearray(path.read_bytes())
    chunk = rng.randrange(0, max(1, len(data) // 4096)) * 4096
    for _ in range(2):
        bit = rng.randrange(chunk * 8, min(len(data), chunk + 4096) * 8)
        data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))
    store = start(tmp_path / "s", clock)
    try:
        assert bodies(store) == [b"body-%03d" % i for i in range(40)]
        found = store.query_messages_by_key("TopicTest", "k17", 10, 0, 1 << 62)
        assert all(m.body == b"body-017" for m in found)  # the index may miss a key, never lie
    finally:
        store.shutdown()


def test_a_zeroed_consume_queue_page_in_the_middle_is_rebuilt(tmp_path, clock):
    """After a power cut a ConsumeQueue page can read back as zeros while later units survived
    (every count still agrees with the checkpoint): the hole is found and the queue rebuilt."""
    crashed_store(tmp_path / "s", clock, count=40)
    cq_file = tmp_path / "s" / "consumequeue" / "TopicTest" / "0" / f"{0:020d}"
    data = bytearray(cq_file.read_bytes())
    data[10 * 20 : 12 * 20] = bytes(40)  # units 10 and 11
    cq_file.write_bytes(bytes(data))
    store = start(tmp_path / "s", clock)
    try:
        assert store.cq_store.queues_with_holes() == []
        assert bodies(store) == [b"body-%03d" % i for i in range(40)]
    finally:
        store.shutdown()
