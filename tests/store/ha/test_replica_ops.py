"""Issue 16's operations on real replicas: the replica set's status (GetReplicaStatus) and
metrics, and a planned master switch (SwitchMaster, RocketMQ's electMaster) under load with no
acknowledged message lost; a switch that cannot be done changes nothing and resumes writes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import generate_latest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.statuses import PutStatus
from services.launcher import cli
from services.store.config import BrokerRole
from services.store.ha.replica_status import group_status
from services.store.metrics import StoreMetrics
from services.store.store import FileStore
from tests.support.etcd import EtcdCluster
from tests.support.filestore import message, small_config
from tests.support.replica_group import Replica, ReplicaGroup, in_sync, put, wait_master
from tests.support.waits import wait_until


@pytest.fixture
def group(etcd_server: EtcdCluster, tmp_path: Path) -> Iterator[ReplicaGroup]:
    made = ReplicaGroup(etcd_server, tmp_path)
    yield made
    made.close()


def stub(replica: Replica) -> tuple[grpc.Channel, pb_grpc.StoreStub]:
    channel = grpc.insecure_channel(replica.address)
    return channel, pb_grpc.StoreStub(channel)


def bodies(store: FileStore) -> set[bytes]:
    """Every message body in the CommitLog."""
    commitlog, found = store.commitlog, set()
    offset, size = commitlog.min_offset, store.config.commitlog_file_size_bytes
    while offset < commitlog.max_offset:
        rec = commitlog.read_record(offset)
        if rec is None:  # a blank record: the next segment
            offset = offset - offset % size + size
            continue
        found.add(bytes(rec.body))
        offset += rec.total_size
    return found


def scrape(store: FileStore) -> str:
    return generate_latest(StoreMetrics(store, {"node_id": "g"}, replication=store.replication).registry).decode()


def test_a_store_without_replication_is_a_group_of_one_master(tmp_path: Path) -> None:
    store = FileStore(small_config(tmp_path / "s", store_host="127.0.0.1:1", replica_id=0))
    store.start()
    try:
        assert put(store, 3) is PutStatus.PUT_OK
        status = group_status(store.replication)
        [me] = status.replicas
        assert (me.replica_id, me.role, me.in_sync, me.lag_bytes, me.connected) == (0, "MASTER", True, 0, True)
        assert me.max_offset == store.commitlog.max_offset and me.epoch == 1
        assert (status.master_id, status.sync_state_set, status.controller_mode) == (0, (0,), False)
        text = scrape(store)
        assert 'pyrmq_store_replica_role{node_id="g",role="MASTER"} 1.0' in text
        assert 'pyrmq_store_replication_lag_bytes{node_id="g",replica_id="0"} 0.0' in text
        assert 'pyrmq_store_sync_state_set_size{node_id="g"} 1.0' in text
        assert 'pyrmq_store_ha_not_available_total{node_id="g"} 0.0' in text
        assert "pyrmq_store_election_duration_seconds_count" in text
    finally:
        store.shutdown()


@pytest.mark.needs("etcd")
def test_status_and_metrics_of_a_group_of_three(group: ReplicaGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = group.make(3)
    a.start()
    wait_master(a)
    b.start(), c.start()
    wait_until(lambda: in_sync(a) == {0, 1, 2}, timeout_s=10)
    assert put(a.live, 20) is PutStatus.PUT_OK
    channel, store = stub(a)
    with channel:
        reply = store.GetReplicaStatus(pb.GetReplicaStatusRequest(), timeout=5)
    assert (reply.replica_id, reply.master_id, reply.master_epoch, reply.controller_mode) == (0, 0, 1, True)
    assert list(reply.sync_state_set) == [0, 1, 2]
    end = a.live.commitlog.max_offset
    for r, replica in zip(reply.replicas, (a, b, c)):
        assert (r.replica_id, r.address, r.in_sync, r.max_offset) == (
            replica.config.replica_id,
            replica.address,
            True,
            end,
        )
        assert r.role == ("MASTER" if r.replica_id == 0 else "SLAVE") and r.lag_bytes == 0 and r.lag_seconds == 0
    # A slave's view: the members as they published themselves.
    wait_until(lambda: group_status(b.live.replication).replicas[0].max_offset == end, timeout_s=5)
    seen = group_status(b.live.replication)
    assert (seen.master_id, seen.master_address, seen.sync_state_set) == (0, a.address, (0, 1, 2))
    assert [r.role for r in seen.replicas] == ["MASTER", "SLAVE", "SLAVE"]
    text = scrape(a.live)
    assert 'pyrmq_store_sync_state_set_size{node_id="g"} 3.0' in text
    assert 'pyrmq_store_replication_lag_seconds{node_id="g",replica_id="2"} 0.0' in text
    assert 'pyrmq_store_elections_won_total{node_id="g"} 1.0' in text
    assert 'pyrmq_store_election_duration_seconds_count{node_id="g"} 1.0' in text
    assert 'pyrmq_store_replica_role{node_id="g",role="SLAVE"} 1.0' in scrape(b.live)
    # A slave that stops acking: its lag shows on the master, in bytes and in seconds.
    monkeypatch.setattr(a.mode, "_sync_state_set", lambda: None)  # c stays in the set: puts wait for it
    c.live.replication.connection.halt()  # type: ignore[union-attr]
    [late] = a.live.put_messages([message(body=b"late" * 50)])
    assert late.status is PutStatus.FLUSH_SLAVE_TIMEOUT  # all-ack: c never confirmed it
    lagging = {r.replica_id: r for r in group_status(a.live.replication).replicas}[2]
    assert lagging.lag_bytes > 0 and lagging.lag_seconds >= 2.5
    assert 'pyrmq_store_slave_persistence_timeout_total{node_id="g"} 1.0' in scrape(a.live)


@pytest.mark.needs("etcd")
def test_planned_switch_under_load_loses_no_acknowledged_message(group: ReplicaGroup) -> None:
    replicas = group.make(3)
    a, b, c = replicas
    a.start()
    wait_master(a)
    b.start(), c.start()
    wait_until(lambda: in_sync(a) == {0, 1, 2}, timeout_s=10)
    acked: list[bytes] = []
    refused: list[PutStatus] = []
    stop = threading.Event()

    def load() -> None:  # a client that retries on whichever replica is master
        i = 0
        while not stop.is_set():
            masters = [r for r in replicas if r.live.replication.is_master]
            if not masters:
                continue
            body = f"load-{i}".encode() * 20
            [result] = masters[0].live.put_messages([message(queue_id=i % 4, body=body)])
            if result.status is PutStatus.PUT_OK:
                acked.append(body)
                i += 1
            else:
                refused.append(result.status)

    putter = threading.Thread(target=load)
    putter.start()
    try:
        wait_until(lambda: len(acked) >= 50, timeout_s=10)
        channel, store = stub(a)
        with channel:
            reply = store.SwitchMaster(pb.SwitchMasterRequest(target_replica_id=1, timeout_ms=3000), timeout=10)
        assert (reply.master_id, reply.master_address, reply.master_epoch) == (1, b.address, 2)
        print(f"planned switch: puts paused {reply.paused_ms} ms at phy_offset {reply.handover_offset}")
        wait_master(b)
        wait_until(lambda: a.live.replication.is_slave and a.live.replication.master_address == b.address)
        count = len(acked)
        wait_until(lambda: len(acked) >= count + 50, timeout_s=10)  # writes go on at the new master
    finally:
        stop.set()
        putter.join(10)
    assert set(refused) <= {PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.FLUSH_SLAVE_TIMEOUT}, refused
    assert b.live.replication.epoch_file.last_epoch == 2
    assert not set(acked) - bodies(b.live)  # every acknowledged message is on the new master
    assert b.live.commitlog.max_offset >= reply.handover_offset
    wait_until(lambda: in_sync(b) == {0, 1, 2}, timeout_s=10)  # the old master rejoined
    assert b.mode.elections.won_total == 1 and b.mode.elections.timed_total == 1
    assert a.mode.switch.switches_total == 1
    assert not a.mode.switch.paused and not a.mode.switch.handing_over


@pytest.mark.needs("etcd")
def test_a_switch_that_cannot_be_done_changes_nothing(group: ReplicaGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = group.make(3, broker_role=BrokerRole.ASYNC_MASTER, ha_max_time_slave_not_catchup_ms=60_000)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    channel, store = stub(a)
    with channel:
        with pytest.raises(grpc.RpcError) as not_in_sync:  # c is not even alive
            store.SwitchMaster(pb.SwitchMasterRequest(target_replica_id=2), timeout=10)
        assert not_in_sync.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        _, slave = stub(b)
        with pytest.raises(grpc.RpcError) as on_a_slave:
            slave.SwitchMaster(pb.SwitchMasterRequest(target_replica_id=0), timeout=10)
        assert on_a_slave.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        # The target does not confirm: the switch times out and writes resume under epoch 1.
        monkeypatch.setattr(a.mode, "confirmed_by", lambda replica_id: 0)
        assert put(a.live, 5) is PutStatus.PUT_OK
        with pytest.raises(grpc.RpcError) as timed_out:
            store.SwitchMaster(pb.SwitchMasterRequest(target_replica_id=1, timeout_ms=300), timeout=10)
        assert timed_out.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert put(a.live, 5, "after") is PutStatus.PUT_OK
    assert a.mode.controller.view.state.master_epoch == 1 and a.mode.switch.switches_total == 0


@pytest.mark.needs("etcd")
def test_pyrmq_replica_list_and_switch(group: ReplicaGroup, etcd_server: EtcdCluster, capsys) -> None:
    a, b = group.make(2)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    assert put(a.live, 10) is PutStatus.PUT_OK
    etcd = ["--group", a.config.broker_name, "--etcd-endpoints", ",".join(etcd_server.endpoints)]

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(["replica", *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("list", *etcd, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["master_id"], doc["master_epoch"], doc["sync_state_set"]) == (0, 1, [0, 1])
    assert [(r["id"], r["role"], r["address"], r["in_sync"]) for r in doc["replicas"]] == [
        (0, "MASTER", a.address, True),
        (1, "SLAVE", b.address, True),
    ]
    code, out, err = run("switch", *etcd, "--to", "1")
    assert code == 0, err
    assert f"replica 1 ({b.address}) is master at masterEpoch 2" in out
    wait_master(b)
    code, out, _ = run("list", *etcd)
    assert code == 0 and "master 1 at masterEpoch 2" in out
    code, _, err = run("switch", *etcd, "--to", "7")  # no such replica
    assert code == 1 and "FAILED_PRECONDITION" in err
    code, _, err = run("list", "--group", "nosuch", "--etcd-endpoints", ",".join(etcd_server.endpoints))
    assert code == 3 and "no broker group" in err
