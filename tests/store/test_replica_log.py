"""Slave-side CommitLog primitives (append the master's raw bytes, truncate to a phy_offset)
and the replica's epochFileCheckpoint on disk."""

from __future__ import annotations

import pytest

from services.domain.format.epoch_file_format import EpochEntry, EpochFileError
from services.store.errors import MetadataFileError, ReplicaDataError, ReplicaOffsetError
from services.store.ha.epoch_file import EPOCH_FILE_NAME, EpochFile
from services.store.ha.replica_log import ReplicaLog
from services.store.store import FileStore
from tests.support.filestore import message, small_config

SEGMENT = 64 * 1024


def replica_log(store: FileStore) -> ReplicaLog:
    assert store.reput is not None and store.checkpoint is not None
    return ReplicaLog(
        store.config,
        store.commitlog,
        store.cq_store,
        store.index_service,
        store.reput,
        store.checkpoint,
        store.transactions,
    )


def fill(store: FileStore, count: int, size: int = 3000) -> None:
    for i in range(count):
        store.put_messages([message(queue_id=i % 3, body=b"%05d" % i + b"x" * size, keys=f"k{i}", tags=f"t{i % 2}")])
    store.reput.run_once()


def raw(store: FileStore, start: int, end: int) -> bytes:
    """The CommitLog bytes in [start, end), read segment by segment."""
    parts = []
    while start < end:
        stop = min(end, start - start % SEGMENT + SEGMENT)
        data = store.commitlog.read_bytes(start, stop - start)
        assert data is not None
        parts.append(bytes(data))
        start = stop
    return b"".join(parts)


def record_ends(store: FileStore, start: int, end: int) -> list[int]:
    """Record boundaries in [start, end] (the end of each record, blank records included)."""
    ends, offset = [], start
    while offset < end:
        req, size = store.commitlog.dispatch_request_at(offset)
        offset = store.commitlog.roll_next_file(offset) if size == 0 else offset + size
        ends.append(offset)
    return ends


def copy_chunks(master: FileStore, slave: FileStore, chunk_bytes: int) -> None:
    """Stream the master's log from the slave's max offset, each chunk cut at a record end."""
    log = replica_log(slave)
    start = slave.commitlog.max_offset
    ends = record_ends(master, start, master.commitlog.max_offset)
    cut = start
    for i, end in enumerate(ends):
        if end - cut >= chunk_bytes or i == len(ends) - 1:
            assert log.append(cut, raw(master, cut, end)) == end
            cut = end


def segment_files(store: FileStore) -> dict[str, bytes]:
    store.commitlog.flush(0)
    return {p.name: p.read_bytes() for p in sorted(store.config.commitlog_dir.iterdir())}


def queue_units(store: FileStore) -> dict[tuple[str, int], list]:
    store.reput.run_once()
    out = {}
    for key, cq in store.cq_store.queues.items():
        out[key] = [cq.get_unit(i) for i in range(cq.min_offset, cq.max_offset)]
    return out


@pytest.fixture
def pair(tmp_path, clock):
    stores = []

    def make(name: str) -> FileStore:
        store = FileStore(small_config(tmp_path / name), clock)
        store.start()
        stores.append(store)
        return store

    yield make("master"), make("slave")
    for store in stores:
        store.shutdown()


def test_chunk_by_chunk_copy_is_byte_identical_with_the_same_consume_queues(pair):
    master, slave = pair
    fill(master, 60)  # ~180 KiB: three 64 KiB segments and a blank record at each end
    assert len(master.commitlog.mfq.files) >= 3
    copy_chunks(master, slave, chunk_bytes=10_000)
    assert slave.commitlog.max_offset == master.commitlog.max_offset
    assert segment_files(slave) == segment_files(master)
    assert queue_units(slave) == queue_units(master)
    assert len(slave.query_messages_by_key("TopicTest", "k42", 10, 0, 1 << 62)) == 1


def test_append_refuses_another_offset_and_partial_or_damaged_records(pair):
    master, slave = pair
    fill(master, 5, size=100)
    log = replica_log(slave)
    ends = record_ends(master, 0, master.commitlog.max_offset)
    first = raw(master, 0, ends[0])
    with pytest.raises(ReplicaOffsetError, match="ends at 0"):
        log.append(ends[0], raw(master, ends[0], ends[1]))
    with pytest.raises(ReplicaDataError, match="bad total size"):
        log.append(0, raw(master, 0, ends[1] - 1))  # the second record cut short
    with pytest.raises(ReplicaDataError, match="short buffer"):
        log.append(0, first + raw(master, ends[0], ends[0] + 5))
    damaged = bytearray(first)
    damaged[200] ^= 0xFF  # inside the body
    with pytest.raises(ReplicaDataError, match="crc"):
        log.append(0, bytes(damaged))
    assert slave.commitlog.max_offset == 0 and not list(slave.config.commitlog_dir.glob("0*"))
    assert log.append(0, first) == ends[0]
    with pytest.raises(ReplicaDataError, match="phy offset field"):
        log.append(ends[0], first)  # a record that says it lives elsewhere
    assert log.append(ends[0], raw(master, ends[0], ends[-1])) == master.commitlog.max_offset


def test_a_chunk_ending_inside_a_blank_record_is_refused(pair):
    master, slave = pair
    fill(master, 25)
    ends = record_ends(master, 0, master.commitlog.max_offset)
    assert SEGMENT in ends  # the first segment ended with a blank record
    before_blank = ends[ends.index(SEGMENT) - 1]
    log = replica_log(slave)
    log.append(0, raw(master, 0, before_blank))
    with pytest.raises(ReplicaDataError, match="blank record size"):
        log.append(before_blank, raw(master, before_blank, SEGMENT - 1))
    assert log.append(before_blank, raw(master, before_blank, SEGMENT)) == SEGMENT


def test_truncate_mid_second_segment_then_append_again_is_byte_identical(pair):
    master, slave = pair
    fill(master, 80)
    assert len(master.commitlog.mfq.files) >= 4
    copy_chunks(master, slave, chunk_bytes=30_000)
    # Mid second segment: the first record boundary past 1.5 segments.
    cut = next(end for end in record_ends(slave, 0, slave.commitlog.max_offset) if end > SEGMENT + SEGMENT // 2)
    log = replica_log(slave)
    files_before = len(slave.commitlog.mfq.files)
    reput_from = log.truncate(cut)
    assert reput_from <= cut and slave.reput.reput_from_offset == cut
    assert slave.commitlog.max_offset == cut and len(slave.commitlog.mfq.files) == 2 < files_before
    assert sorted(p.name for p in slave.config.commitlog_dir.iterdir()) == [f"{0:020d}", f"{SEGMENT:020d}"]
    assert all(unit[0] < cut for units in queue_units(slave).values() for unit in units)
    assert slave.cq_store.max_physic_offset() <= cut
    assert sum(len(u) for u in queue_units(slave).values()) < sum(len(u) for u in queue_units(master).values())
    assert slave.query_messages_by_key("TopicTest", "k79", 10, 0, 1 << 62) == []
    assert slave.checkpoint.current.flushed_phy_offset <= cut
    copy_chunks(master, slave, chunk_bytes=20_000)
    assert segment_files(slave) == segment_files(master)
    assert queue_units(slave) == queue_units(master)
    replica_log(slave).refresh_queue_offset_table()
    assert slave.commitlog.queue_offset_table == master.commitlog.queue_offset_table
    assert len(slave.query_messages_by_key("TopicTest", "k79", 10, 0, 1 << 62)) == 1


def test_truncate_refuses_an_offset_inside_a_record_or_outside_the_log(pair):
    master, _ = pair
    fill(master, 3, size=100)
    log = replica_log(master)
    end = master.commitlog.max_offset
    for bad in (1, end - 1, end + 1, -1):
        with pytest.raises(ReplicaOffsetError):
            log.truncate(bad)
    assert master.commitlog.max_offset == end
    assert log.truncate(end) == end  # already there: nothing dropped


def test_restart_after_truncation_recovers_to_the_truncated_offset(tmp_path, clock):
    root = tmp_path / "s"
    store = FileStore(small_config(root), clock)
    store.start()
    fill(store, 50)
    cut = record_ends(store, 0, store.commitlog.max_offset)[30]
    kept = {key: sum(1 for unit in units if unit[0] < cut) for key, units in queue_units(store).items()}
    replica_log(store).truncate(cut)
    store.halt()  # as kill -9: no final checkpoint
    store = FileStore(small_config(root), clock)
    store.start()
    try:
        assert store.commitlog.max_offset == cut
        assert store.recovery is not None and store.recovery.process_offset == cut
        assert {key: cq.max_offset for key, cq in store.cq_store.queues.items()} == kept
        result = store.put_messages([message(queue_id=0, body=b"after")])[0]
        assert result.phy_offset == cut and result.queue_offset == kept[("TopicTest", 0)]
    finally:
        store.shutdown()


def test_epoch_file_is_written_atomically_and_survives_a_restart(tmp_path):
    epochs = EpochFile(tmp_path)
    assert epochs.load().last_epoch == -1
    assert not (tmp_path / EPOCH_FILE_NAME).exists()
    epochs.append(1, 0)
    epochs.append(2, 4096)
    with pytest.raises(EpochFileError):
        epochs.append(2, 8192)
    assert (tmp_path / EPOCH_FILE_NAME).read_text() == "2\n1-0\n2-4096\n"
    assert not (tmp_path / f"{EPOCH_FILE_NAME}.tmp").exists()
    assert epochs.truncate_suffix_by_offset(4096) == [EpochEntry(2, 4096)]
    assert EpochFile(tmp_path).load().entries(100) == [EpochEntry(1, 0, 100)]
    epochs.append(3, 200)
    assert epochs.truncate_prefix_by_offset(300) == [EpochEntry(1, 0)]
    again = EpochFile(tmp_path)
    again.load()
    assert again.entries(500) == [EpochEntry(3, 300, 500)]
    assert again.find_consistent_point([EpochEntry(3, 300, 400)], 500) == 400


def test_a_damaged_epoch_file_falls_back_to_its_backup_or_refuses(tmp_path):
    epochs = EpochFile(tmp_path)
    epochs.append(1, 0)
    epochs.append(2, 10)
    (tmp_path / EPOCH_FILE_NAME).write_text("2\n1-0\n")  # torn by hand
    assert EpochFile(tmp_path).load().last_epoch == 1  # the .bak: before epoch 2
    (tmp_path / EPOCH_FILE_NAME).write_text("garbage\n")
    (tmp_path / f"{EPOCH_FILE_NAME}.bak").write_text("1\n1-x\n")
    with pytest.raises(MetadataFileError):
        EpochFile(tmp_path).load()


def test_an_empty_log_starts_at_a_later_segment_and_refuses_otherwise(pair):
    master, slave = pair
    fill(master, 60)
    start = master.commitlog.mfq.files[1].file_from_offset  # as if retention deleted the first segment
    log = replica_log(slave)
    with pytest.raises(ReplicaOffsetError):
        log.start_at(start + 1)  # not a segment start
    log.start_at(start)
    assert slave.commitlog.min_offset == slave.commitlog.max_offset == start
    copy_chunks(master, slave, chunk_bytes=10_000)
    assert raw(slave, start, slave.commitlog.max_offset) == raw(master, start, master.commitlog.max_offset)
    slave.reput.run_once()
    for (topic, queue_id), units in queue_units(slave).items():
        assert units == queue_units(master)[(topic, queue_id)][-len(units) :]  # the same units, from later
    with pytest.raises(ReplicaOffsetError):
        log.start_at(2 * start)  # no longer empty
