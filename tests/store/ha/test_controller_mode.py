"""Controller mode (etcd_endpoints set): real store servers whose roles follow the group's
elections in a real etcd: first master, slaves following it, the SyncStateSet growing to all,
failover after the master is killed (epoch bumped, the old master rejoining as a slave with
its lone tail cut), and puts refused with HA_NOT_AVAILABLE below min_in_sync_replicas."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from services.domain.statuses import PutStatus
from services.store.config import BrokerRole, StoreConfig
from services.store.ha.controller_mode import ControllerMode
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.etcd import EtcdCluster, free_ports
from tests.support.filestore import message, small_config
from tests.support.store_rpc import wait_until

pytestmark = pytest.mark.needs("etcd")

SEGMENT_BYTES = 16 * 1024
TTL_MS = 2000


@dataclass
class Replica:
    config: StoreConfig
    store: FileStore | None = None
    server: grpc.Server | None = None

    @property
    def live(self) -> FileStore:
        assert self.store is not None
        return self.store

    @property
    def mode(self) -> ControllerMode:
        coordinator = self.live.replication.coordinator
        assert isinstance(coordinator, ControllerMode)
        return coordinator

    def start(self) -> Replica:
        store = FileStore(self.config)
        store.start()
        server, _ = build_server(store, "127.0.0.1", self.config.port, max_workers=8)
        server.start()
        self.store, self.server = store, server
        return self

    def kill(self) -> None:
        """As kill -9: the lease is left to expire."""
        assert self.server is not None
        stop_server(self.server, grace_s=0)
        self.live.halt()

    def stop(self) -> None:
        if self.server is not None:
            stop_server(self.server, grace_s=0)
        if self.store is not None:
            self.store.shutdown()


@pytest.fixture
def group(etcd_server: EtcdCluster, tmp_path: Path) -> Iterator:
    made: list[Replica] = []

    def make(count: int, **overrides) -> list[Replica]:
        ports = free_ports(count)
        for i, port in enumerate(ports):
            values = dict(
                commitlog_file_size_bytes=SEGMENT_BYTES,
                ha_send_heartbeat_interval_ms=100,
                ha_reconnect_interval_max_ms=200,
                port=port,
                store_host=f"127.0.0.1:{port}",
                replica_id=i,
                etcd_endpoints=",".join(etcd_server.endpoints),
                lease_ttl_ms=TTL_MS,
                broker_role=BrokerRole.SYNC_MASTER,
                sync_replicas_timeout_ms=3000,
            )
            values.update(overrides)
            made.append(Replica(small_config(tmp_path / f"r{i}", **values)))
        return made[-count:]

    yield make
    for replica in reversed(made):
        replica.stop()


def put(store: FileStore, count: int, tag: str = "m") -> PutStatus:
    status = PutStatus.PUT_OK
    for i in range(count):
        [result] = store.put_messages([message(queue_id=i % 4, body=f"{tag}-{i}".encode() * 40, keys=f"{tag}{i}")])
        status = result.status
        if status is not PutStatus.PUT_OK:
            return status
    return status


def wait_master(replica: Replica, timeout_s: float = 10) -> None:
    wait_until(lambda: replica.live.replication.is_master and replica.mode.writable(), timeout_s=timeout_s)


def in_sync(replica: Replica) -> frozenset[int]:
    return replica.mode.controller.view.state.in_sync


def assert_same_log(a: FileStore, b: FileStore, upto: int) -> None:
    assert a.commitlog.read_bytes(0, upto) == b.commitlog.read_bytes(0, upto)


def test_first_replica_masters_the_others_follow_and_join_the_sync_state_set(group):
    first, *others = group(3)
    first.start()
    wait_master(first)
    assert first.live.replication.epoch_file.last_epoch == 1
    assert put(first.live, 40) is PutStatus.PUT_OK  # a set of one: all-ack waits for nobody
    for replica in others:
        replica.start()
    wait_until(lambda: in_sync(first) == {0, 1, 2}, timeout_s=10)
    assert put(first.live, 40, "after") is PutStatus.PUT_OK  # all-ack: every slave confirmed it
    end = first.live.commitlog.max_offset
    for replica in others:
        assert replica.live.replication.is_slave
        assert replica.live.replication.master_address == first.config.store_host
        assert replica.live.commitlog.max_offset == end  # all-ack: confirmed before the put returned
        assert_same_log(first.live, replica.live, end)
        [refused] = replica.live.put_messages([message()])
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE


def test_failover_elects_a_slave_and_the_old_master_rejoins_truncated(group, monkeypatch):
    a, b = group(2, sync_replicas_timeout_ms=500)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    assert put(a.live, 30) is PutStatus.PUT_OK
    confirmed = a.live.commitlog.max_offset
    # A tail only the master holds: appended, never confirmed (FLUSH_SLAVE_TIMEOUT), then killed
    # before it shrank its SyncStateSet (as when etcd is slow to answer), so b stays electable.
    monkeypatch.setattr(a.mode, "_sync_state_set", lambda: None)
    b.live.replication.connection.halt()  # type: ignore[union-attr]
    [lone] = a.live.put_messages([message(body=b"lone" * 100)])
    assert lone.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert a.live.commitlog.max_offset > confirmed
    killed = time.monotonic()
    a.kill()
    wait_master(b, timeout_s=TTL_MS / 1000 + 5)
    failover_s = time.monotonic() - killed
    assert failover_s < TTL_MS / 1000 + 1.5, failover_s
    assert b.live.replication.epoch_file.last_epoch == 2
    assert b.live.commitlog.max_offset == confirmed
    assert put(b.live, 10, "new") is PutStatus.PUT_OK  # a set of {b}: nothing to wait for
    a.start()  # the old master comes back: a slave of b, its lone tail cut
    wait_until(lambda: in_sync(b) == {0, 1}, timeout_s=10)
    assert a.live.replication.is_slave and a.live.replication.client.truncations == 1
    end = b.live.commitlog.max_offset
    wait_until(lambda: a.live.commitlog.max_offset == end, timeout_s=5)
    assert_same_log(a.live, b.live, end)
    assert a.live.replication.epoch_file.entries(end) == b.live.replication.epoch_file.entries(end)
    print(f"failover (kill to writable new master): {failover_s:.2f} s")


def test_below_min_in_sync_replicas_puts_are_refused_before_writing(group):
    a, b = group(2, min_in_sync_replicas=2)
    a.start()
    wait_master(a)
    [early] = a.live.put_messages([message()])
    assert early.status is PutStatus.HA_NOT_AVAILABLE  # a set of one, two needed
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1} and len(a.mode.tracker.local) == 2, timeout_s=10)
    assert put(a.live, 10) is PutStatus.PUT_OK
    b.stop()
    wait_until(lambda: in_sync(a) == {0} and len(a.mode.tracker.local) == 1, timeout_s=10)
    before = a.live.commitlog.max_offset
    [refused] = a.live.put_messages([message()])
    assert refused.status is PutStatus.HA_NOT_AVAILABLE
    assert a.live.commitlog.max_offset == before  # nothing written
