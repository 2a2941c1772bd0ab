"""Replication under faults (issue 16): a zombie master (SIGSTOP until a new master is elected,
then SIGCONT), a killed or hung slave, the etcd leader killed under load, the replication link
cut and slowed by a TCP proxy, and an empty slave catching up from a master whose retention
deleted its first segments. Real store servers (in this process, or as ``python -m
services.store``) and real etcd members (tests/support/etcd.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.statuses import PutStatus
from services.runtime.process import free_ports
from services.store.config import BrokerRole
from services.store.ha.controller_mode import ControllerMode
from services.store.ha.epoch_file import EpochFile
from services.store.store import FileStore
from tests.support.etcd import EtcdCluster
from tests.support.filestore import message, small_config
from tests.support.store_replicas import Replica, ReplicaProcess, put_status, read_commitlog, segment_names
from tests.support.tcp_proxy import TcpProxy
from tests.support.waits import wait_until

SEGMENT_BYTES = 16 * 1024
TTL_MS = 2000
COMMON = dict(
    commitlog_file_size_bytes=SEGMENT_BYTES,
    ha_send_heartbeat_interval_ms=100,
    ha_reconnect_interval_max_ms=200,
)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator:
    """``replicas(name, **config)``: an in-process Replica on a free port, started, stopped at
    teardown."""
    made: list[Replica] = []

    def make(name: str, start: bool = True, **overrides) -> Replica:
        [port] = free_ports(1)
        values = dict(COMMON, port=port, store_host=f"127.0.0.1:{port}")
        values.update(overrides)
        replica = Replica(small_config(tmp_path / name, **values))
        made.append(replica)
        return replica.start() if start else replica

    yield make
    for replica in reversed(made):
        replica.stop()


def mode(replica: Replica) -> ControllerMode:
    coordinator = replica.live.replication.coordinator
    assert isinstance(coordinator, ControllerMode)
    return coordinator


def in_sync(replica: Replica) -> frozenset[int]:
    return mode(replica).controller.view.state.in_sync


def wait_master(replica: Replica, timeout_s: float = 10) -> None:
    wait_until(lambda: replica.live.replication.is_master and mode(replica).writable(), timeout_s=timeout_s)


def put(store: FileStore, count: int, tag: str = "m", body_bytes: int = 600) -> list[PutStatus]:
    statuses = []
    for i in range(count):
        body = (f"{tag}-{i}-".encode() * body_bytes)[:body_bytes]
        [result] = store.put_messages([message(queue_id=i % 4, body=body, keys=f"{tag}{i}")])
        statuses.append(result.status)
    return statuses


def controller_settings(etcd: EtcdCluster, replica_id: int, **overrides) -> dict:
    values = dict(
        COMMON,
        replica_id=replica_id,
        etcd_endpoints=",".join(etcd.endpoints),
        lease_ttl_ms=TTL_MS,
        broker_role=BrokerRole.SYNC_MASTER,
        sync_replicas_timeout_ms=3000,
    )
    values.update(overrides)
    return values


def assert_same_commitlog(a_dir: Path, b_dir: Path, start: int, end: int) -> None:
    assert read_commitlog(a_dir, SEGMENT_BYTES, start, end) == read_commitlog(b_dir, SEGMENT_BYTES, start, end)


# -- 4. the replication link cut and slowed (static roles) -------------------------------------------


def test_cut_link_times_out_sync_puts_then_the_slave_catches_up_and_a_slow_link_slows_puts(replicas):
    master = replicas("master", broker_role=BrokerRole.SYNC_MASTER, sync_replicas_timeout_ms=300)
    ha = master.live.replication.ha_service
    assert ha is not None
    with TcpProxy(master.address) as proxy:
        slave = replicas("slave", broker_role=BrokerRole.SLAVE, replica_id=1, ha_master_address=proxy.address)
        wait_until(lambda: bool(ha.slaves()))
        assert set(put(master.live, 20, "before")) == {PutStatus.PUT_OK}

        proxy.cut()
        started = time.monotonic()
        cut = put(master.live, 3, "cut")
        cut_s = (time.monotonic() - started) / 3
        assert cut == [PutStatus.FLUSH_SLAVE_TIMEOUT] * 3  # SLAVE_PERSISTENCE_TIMEOUT in v2: appended, not confirmed
        assert 0.25 <= cut_s < 1.0, cut_s
        wait_until(lambda: proxy.refused >= 1 and not ha.slaves())  # it keeps trying; the master saw it go
        assert slave.live.commitlog.max_offset < master.live.commitlog.max_offset

        proxy.restore()
        end = master.live.commitlog.max_offset
        wait_until(lambda: slave.live.commitlog.max_offset == end and ha.confirmed_offset() == end, timeout_s=5)
        assert slave.live.replication.client.truncations == 0
        assert set(put(master.live, 10, "after")) == {PutStatus.PUT_OK}

        proxy.delay_ms = 40
        latencies = []
        for i in range(5):
            started = time.monotonic()
            [result] = master.live.put_messages([message(queue_id=i % 4, body=b"slow link")])
            latencies.append(time.monotonic() - started)
            assert result.status is PutStatus.PUT_OK
        assert min(latencies) >= 0.040, latencies  # the chunk and its ack both cross the slow link
        proxy.delay_ms = 0

        end = master.live.commitlog.max_offset
        wait_until(lambda: ha.confirmed_offset() == end, timeout_s=5)
        assert segment_names(master.config.commitlog_dir) == segment_names(slave.config.commitlog_dir)
        assert_same_commitlog(master.config.commitlog_dir, slave.config.commitlog_dir, 0, end)
        print(f"cut: {cut_s * 1000:.0f} ms a put; delayed 40 ms each way: {[round(x * 1000) for x in latencies]} ms")


# -- 5. an empty slave from a master whose retention deleted its first segments ------------------------


def test_empty_slave_starts_at_the_masters_min_offset_after_retention(replicas):
    master = replicas("master", file_reserved_time_hours=0.0)
    put(master.live, 60, "old")
    wait_until(lambda: master.live.reput.dispatch_behind_bytes == 0)  # retention does not wait for reput
    clean = master.live.clean
    assert clean is not None
    assert clean.run_once() > 0  # every segment but the last: expired at once
    put(master.live, 100, "new")
    min_offset = master.live.commitlog.min_offset
    end = master.live.commitlog.max_offset
    assert min_offset > 0 and end - min_offset > 3 * SEGMENT_BYTES

    slave = replicas("slave", broker_role=BrokerRole.SLAVE, replica_id=1, ha_master_address=master.address)
    ha = master.live.replication.ha_service
    assert ha is not None
    wait_until(lambda: slave.live.commitlog.max_offset == end and ha.confirmed_offset() == end, timeout_s=10)
    wait_until(lambda: slave.live.reput.dispatch_behind_bytes == 0 and master.live.reput.dispatch_behind_bytes == 0)
    assert slave.live.commitlog.min_offset == min_offset
    assert segment_names(master.config.commitlog_dir) == segment_names(slave.config.commitlog_dir)
    assert_same_commitlog(master.config.commitlog_dir, slave.config.commitlog_dir, min_offset, end)
    for queue_id in range(4):
        first = master.live.min_offset_in_queue("TopicTest", queue_id)
        assert slave.live.min_offset_in_queue("TopicTest", queue_id) == first > 0
        assert slave.live.max_offset_in_queue("TopicTest", queue_id) == master.live.max_offset_in_queue(
            "TopicTest", queue_id
        )
        got = slave.live.get_messages("TopicTest", queue_id, first, max_count=64).messages
        want = master.live.get_messages("TopicTest", queue_id, first, max_count=64).messages
        assert [m.body for m in got] == [m.body for m in want] and got
    end_epochs = slave.live.replication.epoch_file.entries(end)
    assert end_epochs == master.live.replication.epoch_file.entries(end)

    slave.stop()  # a restart recovers a CommitLog that starts past 0, and goes on from its end
    slave.start()
    put(master.live, 20, "later")
    end = master.live.commitlog.max_offset
    wait_until(lambda: slave.live.commitlog.max_offset == end and ha.confirmed_offset() == end, timeout_s=10)
    assert slave.live.commitlog.min_offset == min_offset
    assert slave.live.replication.client.truncations == 0
    assert_same_commitlog(master.config.commitlog_dir, slave.config.commitlog_dir, min_offset, end)


# -- loads ---------------------------------------------------------------------------------------------


class PutLoop:
    """``threads`` threads putting one message at a time through ``put`` (-> (status, phy_offset,
    wrote_bytes)) until ``stop()``; every answer is kept as (sent_s, answered_s, status, phy, size)."""

    def __init__(self, put_one, threads: int = 3) -> None:
        self.put_one = put_one
        self.results: list[tuple[float, float, str, int, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            status, phy, size = self.put_one(f"loop-{n}-{i}".encode() * 20, n % 4)
            with self._lock:
                self.results.append((sent, time.monotonic(), status, phy, size))
            i += 1

    def stop(self) -> list[tuple[float, float, str, int, int]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
            assert not thread.is_alive()
        return self.results

    def count(self, status: str) -> int:
        with self._lock:
            return sum(1 for r in self.results if r[2] == status)


def in_process_put(store: FileStore):
    def put_one(body: bytes, queue_id: int) -> tuple[str, int, int]:
        [result] = store.put_messages([message(queue_id=queue_id, body=body)])
        return result.status.name, result.phy_offset, result.wrote_bytes

    return put_one


def grpc_put(address: str):
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.StoreStub(channel)

    def put_one(body: bytes, queue_id: int) -> tuple[str, int, int]:
        return put_status(stub, body, queue_id, timeout_s=20)

    return put_one, channel


# -- 1. a zombie master -----------------------------------------------------------------------------


@pytest.mark.needs("etcd")
def test_zombie_master_acknowledges_nothing_and_rejoins_as_a_truncated_slave(
    etcd_server, replicas, processes, tmp_path, monkeypatch
):
    [port] = free_ports(1)
    a = ReplicaProcess(tmp_path / "a", port, controller_settings(etcd_server, 0), processes).start()
    a_put, channel = grpc_put(a.address)
    wait_until(lambda: a_put(b"first", 0)[0] == "PUT_OK", timeout_s=10)  # elected; a set of one
    b = replicas("b", **controller_settings(etcd_server, 1))
    wait_until(lambda: in_sync(b) == {0, 1}, timeout_s=10)

    # b takes no more of a's bytes once ``hold`` is set (its stream stays open, so a keeps b in
    # its SyncStateSet), until ``release``: a's later puts are appended on a alone.
    hold, held, release = threading.Event(), threading.Event(), threading.Event()
    lone: list[int] = []  # where the chunks b never took end
    client = b.live.replication.client
    on_chunk = client.on_chunk

    def holding_on_chunk(phy_offset: int, data: bytes, epoch: int, epoch_start_offset: int):
        if hold.is_set() and data:
            lone.append(phy_offset + len(data))
            held.set()
            release.wait(20)
            raise ConnectionError("chunk dropped: the link to the old master is gone")
        return on_chunk(phy_offset, data, epoch, epoch_start_offset)

    monkeypatch.setattr(client, "on_chunk", holding_on_chunk)
    loop = PutLoop(a_put)
    wait_until(lambda: loop.count("PUT_OK") >= 10, timeout_s=10)
    hold.set()
    assert held.wait(5)
    time.sleep(0.2)  # every loop thread's put is appended on a and waits for b
    a.sigstop()
    stopped = time.monotonic()
    confirmed = b.live.commitlog.max_offset
    wait_until(lambda: mode(b).controller.master_epoch() is not None, timeout_s=TTL_MS / 1000 + 5)
    release.set()
    wait_master(b)
    failover_s = time.monotonic() - stopped
    assert b.live.replication.epoch_file.last_epoch == 2
    assert b.live.commitlog.max_offset == confirmed
    assert set(put(b.live, 10, "new")) == {PutStatus.PUT_OK}  # a set of {b}

    a.sigcont()
    wait_until(lambda: in_sync(b) == {0, 1}, timeout_s=10)  # a rejoined, as b's slave
    wait_until(lambda: loop.count("PUT_OK") + 30 < len(loop.results), timeout_s=10)  # a answers, refusing
    results = loop.stop()
    channel.close()
    end = b.live.commitlog.max_offset
    ha = b.live.replication.ha_service
    assert ha is not None
    wait_until(lambda: [(p.replica_id, p.confirmed_offset) for p in ha.slaves()] == [(0, end)], timeout_s=5)

    assert max(lone) > confirmed  # a had appended a tail of its own when it was stopped
    after_stop = [r for r in results if r[1] >= stopped]  # answered after the SIGSTOP (in flight, or sent later)
    assert len(after_stop) > 30 and all(status != "PUT_OK" for _, _, status, _, _ in after_stop), after_stop[:5]
    for _, _, status, phy, size in results:
        if status == "PUT_OK":
            assert phy + size <= confirmed  # acknowledged: b had it before it was elected
    assert "diverged from the master: truncating" in a.log()
    assert a.terminate() == 0
    a_log = a.commitlog_dir
    assert_same_commitlog(a_log, b.config.commitlog_dir, 0, end)
    assert not any(read_commitlog(a_log, SEGMENT_BYTES, end, end - end % SEGMENT_BYTES + SEGMENT_BYTES))
    epochs = EpochFile(tmp_path / "a" / "store")
    epochs.load()
    assert epochs.entries(end) == b.live.replication.epoch_file.entries(end)
    refused = sorted({status for _, _, status, _, _ in after_stop})
    print(f"zombie: failover {failover_s:.2f} s after SIGSTOP; its answers after the stop: {refused}")


# -- 2. a slave hung, then killed ---------------------------------------------------------------------


def start_slave_process(etcd: EtcdCluster, processes, tmp_path: Path, replica_id: int = 1) -> ReplicaProcess:
    [port] = free_ports(1)
    return ReplicaProcess(tmp_path / f"p{replica_id}", port, controller_settings(etcd, replica_id), processes).start()


@pytest.mark.needs("etcd")
def test_hung_then_killed_slave_leaves_the_sync_state_set_and_sync_writes_go_on(
    etcd_server, replicas, processes, tmp_path
):
    a = replicas("a", **controller_settings(etcd_server, 0, ha_max_time_slave_not_catchup_ms=500))
    wait_master(a)
    b = start_slave_process(etcd_server, processes, tmp_path)
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    loop = PutLoop(in_process_put(a.live), threads=2)
    wait_until(lambda: loop.count("PUT_OK") >= 10)

    b.sigstop()  # connected, silent: only ha_max_time_slave_not_catchup_ms tells
    hung = time.monotonic()
    wait_until(lambda: in_sync(a) == {0}, timeout_s=5)
    shrunk_s = time.monotonic() - hung
    ok = loop.count("PUT_OK")
    wait_until(lambda: loop.count("PUT_OK") >= ok + 20)  # SYNC writes go on without b
    b.sigcont()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)  # caught up again: back in
    ok = loop.count("PUT_OK")
    wait_until(lambda: loop.count("PUT_OK") >= ok + 10)

    b.sigkill()  # its connection closes: out at once
    killed = time.monotonic()
    wait_until(lambda: in_sync(a) == {0}, timeout_s=5)
    killed_shrunk_s = time.monotonic() - killed
    ok = loop.count("PUT_OK")
    wait_until(lambda: loop.count("PUT_OK") >= ok + 20)
    results = loop.stop()
    assert {status for _, _, status, _, _ in results} == {"PUT_OK"}
    blip_s = max(answered - sent for sent, answered, _, _, _ in results if answered >= hung)
    assert shrunk_s < 2.0 and killed_shrunk_s < 1.0 and blip_s < 2.5, (shrunk_s, killed_shrunk_s, blip_s)
    print(
        f"hung slave out of the set after {shrunk_s:.2f} s, killed slave after {killed_shrunk_s:.2f} s; "
        f"longest put {blip_s * 1000:.0f} ms ({len(results)} puts, all PUT_OK)"
    )


@pytest.mark.needs("etcd")
def test_killed_slave_below_min_in_sync_replicas_refuses_writes(etcd_server, replicas, processes, tmp_path):
    a = replicas("a", **controller_settings(etcd_server, 0, min_in_sync_replicas=2))
    wait_master(a)
    b = start_slave_process(etcd_server, processes, tmp_path)
    wait_until(lambda: in_sync(a) == {0, 1} and len(mode(a).tracker.local) == 2, timeout_s=10)
    assert set(put(a.live, 10)) == {PutStatus.PUT_OK}

    b.sigstop()
    in_flight: list[PutStatus] = []
    before = a.live.commitlog.max_offset
    sender = threading.Thread(target=lambda: in_flight.extend(put(a.live, 1, "in-flight")))
    sender.start()
    wait_until(lambda: a.live.commitlog.max_offset > before)  # appended, waiting for b
    assert not in_flight
    b.sigkill()
    wait_until(lambda: in_sync(a) == {0} and len(mode(a).tracker.local) == 1, timeout_s=5)
    sender.join(5)
    # Appended while b was in the set, then b was lost: held by one replica, below the minimum.
    assert in_flight == [PutStatus.FLUSH_SLAVE_TIMEOUT]
    before = a.live.commitlog.max_offset
    assert set(put(a.live, 5, "refused")) == {PutStatus.HA_NOT_AVAILABLE}
    assert a.live.commitlog.max_offset == before  # nothing written


# -- 3. the etcd leader killed under load --------------------------------------------------------------


@pytest.mark.needs("etcd")
def test_etcd_leader_killed_under_load_the_master_keeps_its_role_and_puts_succeed(etcd_cluster, replicas):
    a = replicas("a", **controller_settings(etcd_cluster, 0))
    wait_master(a)
    b = replicas("b", **controller_settings(etcd_cluster, 1))
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    epoch = a.live.replication.master_epoch
    loop = PutLoop(in_process_put(a.live), threads=2)
    wait_until(lambda: loop.count("PUT_OK") >= 20)
    killed_at = time.monotonic()
    etcd_cluster.kill_leader()
    new_leader = etcd_cluster.wait_leader(5)
    elected_s = time.monotonic() - killed_at
    time.sleep(TTL_MS / 1000 + 1)  # past a whole lease TTL: the lease was renewed through the new leader
    results = loop.stop()
    statuses = [status for _, _, status, _, _ in results]
    latencies = [answered - sent for sent, answered, _, _, _ in results if answered >= killed_at]
    assert a.live.replication.is_master and a.live.replication.master_epoch == epoch and mode(a).writable()
    assert b.live.replication.is_slave and in_sync(a) == {0, 1}
    assert set(statuses) == {"PUT_OK"}, {s: statuses.count(s) for s in set(statuses)}
    assert max(latencies) < 1.0, max(latencies)
    print(
        f"etcd leader killed: new leader {new_leader} in {elected_s:.2f} s; {len(latencies)} puts after the kill, "
        f"all PUT_OK, longest {max(latencies) * 1000:.0f} ms"
    )
