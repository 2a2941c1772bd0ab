"""The replication cores without gRPC: the master's chunks (ha/ha_service.py), the slave's
handshake and append (ha/ha_client.py), and the SYNC_MASTER group wait."""

from __future__ import annotations

import threading

import pytest

from services.domain.epoch_cache import EpochEntry
from services.runtime.clock import ManualClock
from services.store.config import BrokerRole
from services.store.errors import ReplicationError
from services.store.ha.ha_service import HAService
from services.store.store import FileStore
from tests.support.filestore import message, small_config
from tests.support.waits import wait_until

SEGMENT = 16 * 1024
NOBODY = "127.0.0.1:9"  # a slave whose connection loop never reaches a master: the test drives its core


@pytest.fixture
def open_stores(tmp_path):
    stores: list[FileStore] = []

    def open_store(name: str, **overrides) -> FileStore:
        overrides.setdefault("commitlog_file_size_bytes", SEGMENT)
        store = FileStore(small_config(tmp_path / name, **overrides), ManualClock())
        store.start()
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        store.shutdown()


def fill(store: FileStore, count: int, tag: str) -> None:
    for i in range(count):
        [result] = store.put_messages([message(queue_id=i % 2, body=f"{tag}{i}-".encode() * 90)])
        assert result.ok


def test_chunks_are_whole_records_within_one_segment_and_one_epoch(open_stores):
    master = open_stores("a", ha_transfer_batch_size_bytes=4096)
    fill(master, 40, "one")
    master.shutdown()
    master = open_stores("a", ha_transfer_batch_size_bytes=4096)  # epoch 2 starts here
    epoch_2_start = master.commitlog.max_offset
    fill(master, 40, "two")
    slave = open_stores("b", broker_role=BrokerRole.SLAVE, ha_master_address=NOBODY)
    ha, client = master.replication.ha_service, slave.replication.client
    assert ha is not None and client is not None
    _, epochs = client.handshake()
    position = client.on_master_handshake(ha.handshake(1)[3], master.commitlog.min_offset)
    assert epochs == [] and position == 0
    chunks = []
    while (chunk := ha.next_chunk(position)) is not None:
        chunks.append(chunk)
        assert len(chunk.data) <= 4096
        assert chunk.phy_offset // SEGMENT == (chunk.end_offset - 1) // SEGMENT  # one segment
        assert chunk.end_offset <= epoch_2_start or chunk.phy_offset >= epoch_2_start  # one epoch
        assert chunk.epoch == (1 if chunk.phy_offset < epoch_2_start else 2)
        position = client.on_chunk(chunk.phy_offset, chunk.data, chunk.epoch, chunk.epoch_start_offset).max_phy_offset
    assert position == master.commitlog.max_offset and len(chunks) > 2 * master.commitlog.max_offset // SEGMENT
    end = master.commitlog.max_offset
    assert slave.replication.epoch_file.entries(end) == master.replication.epoch_file.entries(end)
    assert [e.epoch for e in slave.replication.epoch_file.entries(end)] == [1, 2]


def test_a_slave_with_no_epoch_in_common_refuses_to_follow(open_stores):
    alone = open_stores("b")
    fill(alone, 5, "x")
    end = alone.commitlog.max_offset
    alone.shutdown()
    slave = open_stores("b", broker_role=BrokerRole.SLAVE, ha_master_address=NOBODY)
    client = slave.replication.client
    assert client is not None
    with pytest.raises(ReplicationError, match="no epoch in common"):
        client.on_master_handshake([EpochEntry(7, 0, 10_000)], 0)
    assert slave.commitlog.max_offset == end and client.truncations == 0


def test_sync_wait_needs_in_sync_replicas_minus_one_slaves_and_one_ack_releases_many(open_stores):
    master = open_stores("a", broker_role=BrokerRole.SYNC_MASTER, in_sync_replicas=3)
    ha = master.replication.ha_service
    assert isinstance(ha, HAService) and ha.acks_needed == 2
    first, second = ha.handshake(1)[0], ha.handshake(2)[0]
    ha.on_ack(first, 500, 500)
    assert not ha.wait_for_replicas(100, 0)  # one slave of the two needed
    ha.on_ack(second, 50, 50)
    assert ha.confirmed_offset() == 50 and not ha.wait_for_replicas(100, 0)
    released: list[bool] = []
    waiters = [
        threading.Thread(target=lambda end=end: released.append(ha.wait_for_replicas(end, 10)))
        for end in range(60, 500, 40)
    ]
    for waiter in waiters:
        waiter.start()
    ha.on_ack(second, 500, 500)  # one ack covers every waiter
    for waiter in waiters:
        waiter.join()
    assert released == [True] * len(waiters)
    stale = ha.handshake(2)[0]  # the replica reconnected: its old session's end removes nothing
    ha.disconnect(second)
    assert {p.replica_id for p in ha.slaves()} == {1, 2}
    ha.disconnect(stale)
    assert [p.replica_id for p in ha.slaves()] == [1]


def test_reads_see_only_what_the_sync_state_set_confirmed(open_stores):
    """readUnCommitted false: a controller-mode master's reput stops at the offset every slave of
    its SyncStateSet confirmed, so no consumer reads a message a failover could take back."""
    master = open_stores("a")
    members = {1}
    master.replication.become_master(2, None, None, lambda: frozenset(members))
    ha = master.replication.ha_service
    assert isinstance(ha, HAService)
    start = master.commitlog.max_offset
    assert ha.commit_offset() == start  # all it held when elected
    ends = []
    for i in range(3):
        [result] = master.put_messages([message(queue_id=0, body=f"m{i}".encode() * 50)])
        assert result.ok
        ends.append(master.commitlog.max_offset)
    master.reput.run_once()
    assert master.max_offset_in_queue("TopicTest", 0) == 0  # written, not readable
    session = ha.handshake(1)[0]
    ha.on_ack(session, ends[-1], ends[0])  # it holds all, confirmed the first
    wait_until(lambda: master.max_offset_in_queue("TopicTest", 0) == 1)
    ha.on_ack(session, ends[-1], start)  # an older ack never moves it back
    assert ha.commit_offset() == ends[0]
    ha.on_ack(session, ends[-1], ends[-1])
    wait_until(lambda: master.max_offset_in_queue("TopicTest", 0) == 3)
    ha.disconnect(session)  # a member without a session holds it where it is
    [result] = master.put_messages([message(queue_id=0, body=b"late")])
    assert result.ok and ha.commit_offset() == ends[-1]
    members.clear()  # the set shrank to the master alone: everything it wrote is committed
    ha.wake()
    wait_until(lambda: master.max_offset_in_queue("TopicTest", 0) == 4)
