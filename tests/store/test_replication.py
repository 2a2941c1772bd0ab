"""CommitLog replication between real store servers on 127.0.0.1:0 (services/store/ha/): a slave's
CommitLog, ConsumeQueues and epochs end byte-identical to its master's."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.statuses import PutStatus
from services.store.config import BrokerRole, config_from_settings
from services.store.ha.epoch_file import EpochFile
from services.store.rpc.server import stop_server
from tests.support.filestore import message
from tests.support.static_nodes import Node, StaticNodes
from tests.support.waits import wait_until

SEGMENT_BYTES = 16 * 1024


@pytest.fixture
def nodes():
    started = StaticNodes({"commitlog_file_size_bytes": SEGMENT_BYTES})
    yield started.start
    started.close()


def put(node: Node, count: int, tag: str = "m", body_bytes: int = 600) -> int:
    """``count`` messages over 4 queues; returns the master's max phy_offset after them."""
    for i in range(count):
        body = (f"{tag}-{i}-".encode() * body_bytes)[:body_bytes]
        [result] = node.store.put_messages([message(queue_id=i % 4, body=body, keys=f"{tag}{i}")])
        assert result.status is PutStatus.PUT_OK, result
    return node.store.commitlog.max_offset


def slave_of(master: Node, start, root: Path, **overrides) -> Node:
    return start(root, broker_role=BrokerRole.SLAVE, replica_id=1, ha_master_address=master.address, **overrides)


def wait_caught_up(master: Node, slave: Node) -> None:
    ha = master.store.replication.ha_service

    def caught_up() -> bool:
        end = master.store.commitlog.max_offset
        slaves = ha.slaves()
        return (
            slave.store.commitlog.max_offset == end
            and bool(slaves)
            and slaves[0].confirmed_offset == end
            and slave.store.reput.dispatch_behind_bytes == 0
            and master.store.reput.dispatch_behind_bytes == 0
        )

    wait_until(caught_up, timeout_s=20)


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_identical(master: Node, slave: Node) -> None:
    """CommitLog segments byte-identical up to the slave's confirmed offset (its whole log: the
    master confirmed all of it), ConsumeQueue files identical, the same epochs."""
    confirmed = master.store.replication.ha_service.slaves()[0].confirmed_offset
    assert confirmed == slave.store.commitlog.max_offset
    master_log, slave_log = files_of(master.config.commitlog_dir), files_of(slave.config.commitlog_dir)
    assert sorted(master_log) == sorted(slave_log)
    for name, data in master_log.items():
        start = int(name)
        upto = max(0, min(len(data), confirmed - start))
        assert slave_log[name][:upto] == data[:upto], f"segment {name} differs"
        assert not any(slave_log[name][upto:]), f"segment {name}: bytes beyond the confirmed offset"
    for node in (master, slave):
        node.store.cq_store.flush(0)
    master_cq, slave_cq = files_of(master.config.consume_queue_dir), files_of(slave.config.consume_queue_dir)
    assert master_cq and master_cq == slave_cq
    end = master.store.commitlog.max_offset
    assert slave.store.replication.epoch_file.entries(end) == master.store.replication.epoch_file.entries(end)


def test_slave_follows_master_across_segments(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master, nodes, tmp_path / "b")
    end = put(master, 120)
    assert end > 4 * SEGMENT_BYTES
    wait_caught_up(master, slave)
    assert_identical(master, slave)
    got = slave.store.get_messages("TopicTest", 1, 0, max_count=64)
    assert [m.body[:6] for m in got.messages[:2]] == [b"m-1-m-", b"m-5-m-"]  # reads are served by a slave


def test_slave_refuses_puts(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master, nodes, tmp_path / "b")
    [result] = slave.store.put_messages([message()])
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE and "slave" in result.error
    with grpc.insecure_channel(slave.address) as channel:
        stub = pb_grpc.StoreStub(channel)
        request = pb.PutMessagesRequest(messages=[pb.Message(topic="TopicTest", body=b"x")])
        with pytest.raises(grpc.RpcError) as raised:
            stub.PutMessages(request, timeout=5)
        assert raised.value.code() is grpc.StatusCode.UNAVAILABLE and "slave" in raised.value.details()
        with pytest.raises(grpc.RpcError) as raised:  # a slave is no master to replicate from
            list(stub.Replicate(iter([pb.ReplicateRequest(handshake=pb.ReplicaHandshake(replica_id=2))]), timeout=5))
        assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_empty_slave_catches_up_from_many_segments(nodes, tmp_path):
    master = nodes(tmp_path / "a", ha_transfer_batch_size_bytes=4096)
    end = put(master, 200)
    assert end > 8 * SEGMENT_BYTES
    slave = slave_of(master, nodes, tmp_path / "b")
    wait_caught_up(master, slave)
    assert_identical(master, slave)
    assert slave.store.max_offset_in_queue("TopicTest", 3) == 50


def test_diverged_slave_truncates_to_the_consistent_point(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master, nodes, tmp_path / "b")
    common = put(master, 40, tag="common")
    wait_caught_up(master, slave)
    slave.stop()
    master.stop()
    # The slave's log grows alone under epoch 1 (as a master would have written before its
    # election was undone): written by a store started as a master, then that term forgotten.
    alone = nodes(tmp_path / "b")
    put(alone, 25, tag="alone")
    alone.stop()
    epochs = EpochFile(alone.config.store_root)
    epochs.load()
    epochs.truncate_suffix_by_offset(common)
    assert [e.epoch for e in epochs.entries(-1)] == [1]
    # The master comes back under epoch 2 and writes other records over the same offsets.
    master = nodes(tmp_path / "a")
    assert master.store.replication.epoch_file.last_epoch == 2
    put(master, 30, tag="newer")
    slave = slave_of(master, nodes, tmp_path / "b")
    wait_caught_up(master, slave)
    assert slave.store.replication.client.truncations == 1
    assert_identical(master, slave)
    bodies = [m.body[:5] for m in slave.store.get_messages("TopicTest", 0, 0, max_count=64).messages]
    assert bodies.count(b"alone") == 0 and bodies.count(b"newer") == 8 and bodies.count(b"commo") == 10


def test_stream_survives_a_slave_restart(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master, nodes, tmp_path / "b")
    put(master, 30, tag="before")
    wait_caught_up(master, slave)
    slave.stop()
    wait_until(lambda: not master.store.replication.ha_service.slaves())
    put(master, 60, tag="while-down")
    slave = slave_of(master, nodes, tmp_path / "b")
    put(master, 30, tag="after")
    wait_caught_up(master, slave)
    assert slave.store.replication.client.truncations == 0
    assert_identical(master, slave)


def test_sync_master_waits_for_the_slave(nodes, tmp_path):
    master = nodes(tmp_path / "a", broker_role=BrokerRole.SYNC_MASTER, sync_replicas_timeout_ms=300)
    [alone] = master.store.put_messages([message(body=b"no slave yet")])
    assert alone.status is PutStatus.FLUSH_SLAVE_TIMEOUT  # appended, not replicated in time
    assert alone.phy_offset >= 0
    slave = slave_of(master, nodes, tmp_path / "b")
    ha = master.store.replication.ha_service
    results: list = []
    lock = threading.Lock()

    def producer(n: int) -> None:
        for i in range(25):
            [result] = master.store.put_messages([message(queue_id=n % 4, body=f"{n}-{i}".encode())])
            confirmed = ha.confirmed_offset()
            with lock:
                results.append((result, confirmed))

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 200
    for result, confirmed in results:
        assert result.status is PutStatus.PUT_OK
        assert confirmed >= result.phy_offset + result.wrote_bytes  # the slave had it before the ack
    wait_caught_up(master, slave)
    assert_identical(master, slave)
    slave.stop()
    [late] = master.store.put_messages([message(body=b"slave gone")])
    assert late.status is PutStatus.FLUSH_SLAVE_TIMEOUT


def test_a_stopping_master_ends_its_replication_streams_at_once(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master, nodes, tmp_path / "b")
    put(master, 5)
    wait_caught_up(master, slave)
    started = time.monotonic()
    stop_server(master.server, grace_s=5)  # without the streams' end it would sit out the grace
    assert time.monotonic() - started < 2.5
    wait_until(lambda: not slave.store.replication.connection.connected.is_set())


class _SilentMaster(pb_grpc.StoreServicer):
    """Answers the handshake, then sends nothing (a master stopped with SIGSTOP, say)."""

    def __init__(self) -> None:
        self.handshakes = 0
        self.released = threading.Event()

    def Replicate(self, requests, context):
        next(requests)
        self.handshakes += 1
        yield pb.ReplicateResponse(handshake=pb.MasterHandshake())
        while context.is_active() and not self.released.wait(0.05):
            pass


def test_a_slave_drops_a_silent_master_and_reconnects(nodes, tmp_path):
    silent = _SilentMaster()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_StoreServicer_to_server(silent, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        slave = nodes(
            tmp_path / "b",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{port}",
            ha_housekeeping_interval_ms=300,
        )
        connection = slave.store.replication.connection
        wait_until(lambda: connection.sessions >= 3)  # each session dropped after 300 ms of silence
        assert silent.handshakes >= 3
    finally:
        silent.released.set()
        server.stop(0).wait()


def test_a_master_drops_a_slave_that_stopped_acking(nodes, tmp_path):
    master = nodes(tmp_path / "a", ha_housekeeping_interval_ms=300)
    ha = master.store.replication.ha_service
    stalled = threading.Event()

    def requests():
        yield pb.ReplicateRequest(handshake=pb.ReplicaHandshake(replica_id=7))
        yield pb.ReplicateRequest(ack=pb.ReplicaAck(max_phy_offset=0, confirmed_offset=0))
        stalled.wait(10)  # then never acks a heartbeat

    with grpc.insecure_channel(master.address) as channel:
        responses = pb_grpc.StoreStub(channel).Replicate(requests(), timeout=10)
        assert next(responses).HasField("handshake")
        wait_until(lambda: [p.replica_id for p in ha.slaves()] == [7])
        wait_until(lambda: not ha.slaves())  # silent for more than 300 ms: its stream is cancelled
        with pytest.raises(grpc.RpcError) as ended:
            for _ in responses:
                pass
        assert ended.value.code() is grpc.StatusCode.CANCELLED
        stalled.set()


def test_a_replica_registers_its_advertised_host_and_keeps_an_ip_in_its_records(tmp_path: Path) -> None:
    """store_host (in every record, offset message ids) must be an IP; the address registered in
    etcd may be a name (compose's service names: ``advertised_host``)."""
    values = {"data_dir": tmp_path, "host": "0.0.0.0", "port": 10911}
    assert config_from_settings(values).registered_address == "127.0.0.1:10911"
    named = config_from_settings({**values, "advertised_host": "store-1"})
    assert named.store_host == "127.0.0.1:10911" and named.registered_address == "store-1:10911"
    assert config_from_settings({**values, "advertised_host": "::1"}).registered_address == "[::1]:10911"


def test_controller_mode_refuses_port_0(tmp_path: Path) -> None:
    """A replica registers its address in etcd before its server binds: port 0 would register
    an address nobody can reach."""
    values = {"data_dir": tmp_path, "host": "127.0.0.1", "port": 0, "etcd_endpoints": "127.0.0.1:2379"}
    with pytest.raises(ValueError, match="fixed port"):
        config_from_settings(values)
    assert config_from_settings({**values, "etcd_endpoints": ""}).port == 0  # without etcd it is fine
