"""The config/ tables follow the CommitLog to the slaves (services/store/ha/config_sync.py): topics,
groups, consumer and delay offsets and users created on the master reach the slave (its APIs and
its files, byte for byte) and survive its restart; a slave refuses every state-changing call
with UNAVAILABLE "not the master..."; after a failover in controller mode the new master pops
from the offsets the old one had committed."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.names import is_system_topic
from services.runtime.clock import ManualClock
from services.runtime.process import free_ports
from services.store.config import BrokerRole
from services.store.errors import NotMasterWriteError
from services.store.ha.config_sync import ConfigTables
from services.store.metadata.auth_config import AuthConfigManager, StoredAcl, StoredPolicy, StoredUser
from services.store.metadata.config_files import SubscriptionGroupConfig, TopicConfig
from services.store.metadata.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.pop.model import AckStatus
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.etcd import EtcdCluster, etcd_server  # noqa: F401 - fixture
from tests.support.filestore import message, small_config
from tests.support.static_nodes import Node, StaticNodes
from tests.support.waits import wait_until

CONFIG_FILES = ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json", "auth.json")
NOBODY = "127.0.0.1:9"  # a master address nothing answers on


@pytest.fixture
def nodes():
    started = StaticNodes({"ha_config_sync_interval_ms": 50})
    yield started.start
    started.close()


def slave_of(master_address: str, start, root: Path, **overrides) -> Node:
    return start(root, broker_role=BrokerRole.SLAVE, replica_id=1, ha_master_address=master_address, **overrides)


def change_everything(store: FileStore) -> None:
    """One of each kind of state, changed through the master's core."""
    store.topics.create_or_update(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4))
    store.groups.create_or_update(SubscriptionGroupConfig("billing", retry_max_times=3))
    store.pop.commit_offset("billing", "Orders", 2, 17)
    store.delay_offsets.update(3, 42)
    store.auth.put_user(StoredUser("alice", "secret-key"))
    store.auth.put_acl(StoredAcl("alice", (StoredPolicy("Topic:Orders", ("Pub", "Sub"), "Allow"),)))


def has_everything(store: FileStore) -> bool:
    topic = store.topics.get("Orders")
    group = store.groups.get("billing")
    users, acls, _ = store.auth.snapshot()
    return (
        topic is not None
        and topic.write_queue_nums == 4
        and group is not None
        and group.retry_max_times == 3
        and store.consumer_offsets.query_offset("billing", "Orders", 2) == 17
        and store.delay_offsets.get(3) == 42
        and [u.username for u in users] == ["alice"]
        and [a.username for a in acls] == ["alice"]
    )


def config_files(node: Node) -> dict[str, bytes]:
    directory = node.config.config_dir
    return {name: (directory / name).read_bytes() for name in CONFIG_FILES if (directory / name).exists()}


def test_tables_reach_the_slave_in_memory_and_byte_for_byte_on_disk(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    change_everything(master.store)  # before the slave connects: sent after the handshake
    slave = slave_of(master.address, nodes, tmp_path / "b")
    wait_until(lambda: has_everything(slave.store))
    master.store.pop.commit_offset("billing", "Orders", 2, 18)  # while connected: the next check sends it
    master.store.topics.create_or_update(TopicConfig("Invoices"))
    wait_until(
        lambda: (
            slave.store.consumer_offsets.query_offset("billing", "Orders", 2) == 18
            and slave.store.topics.get("Invoices") is not None
        )
    )
    # The files: the master writes its offsets every flush_consumer_offset_interval_ms (a new
    # dataVersion), the slave then gets that content too.
    master.store.consumer_offsets.persist()
    master.store.delay_offsets.persist()
    wait_until(lambda: config_files(slave) == config_files(master))
    assert sorted(config_files(master)) == sorted(CONFIG_FILES)
    with grpc.insecure_channel(slave.address) as channel:  # the slave's API answers them
        stub = pb_grpc.StoreStub(channel)
        assert stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"), timeout=5).write_queue_nums == 4
        assert stub.GetGroup(pb.GetGroupRequest(group_name="billing"), timeout=5).retry_max_times == 3
        query = pb.QueryConsumerOffsetRequest(group="billing", topic="Orders", queue_id=2)
        assert stub.QueryConsumerOffset(query, timeout=5).offset == 18
        assert stub.GetDelayOffset(pb.GetDelayOffsetRequest(level=3), timeout=5).offset == 42
        auth = stub.GetAuthConfig(pb.GetAuthConfigRequest(), timeout=5)
        assert [u.username for u in auth.users] == ["alice"]
        assert auth.version == master.store.auth.snapshot()[2]  # brokers' caches see one version across replicas
    stats = slave.store.replication.config_tables.stats()
    assert stats.snapshots_installed >= len(CONFIG_FILES) and stats.snapshots_refused == 0
    wait_until(  # (a last change, such as the pop journal's topic, may still be on its way)
        lambda: (
            master.store.replication.config_tables.stats().snapshots_sent
            == slave.store.replication.config_tables.stats().snapshots_installed
        )
    )


def _refused(call, request) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=5)
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE, raised.value
    assert raised.value.details().startswith("not the master"), raised.value.details()


def test_a_slave_refuses_every_state_change_and_still_serves_reads(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    change_everything(master.store)
    slave = slave_of(master.address, nodes, tmp_path / "b")
    wait_until(lambda: has_everything(slave.store))
    before = config_files(slave)
    handle = "garbage-handle"
    with grpc.insecure_channel(slave.address) as channel:
        stub = pb_grpc.StoreStub(channel)
        for call, request in [
            (stub.CreateOrUpdateTopic, pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="New"))),
            (stub.DeleteTopic, pb.DeleteTopicRequest(topic_name="Orders")),
            (
                stub.CreateOrUpdateGroup,
                pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name="g")),
            ),
            (stub.DeleteGroup, pb.DeleteGroupRequest(group_name="billing")),
            (stub.CommitConsumerOffset, pb.CommitConsumerOffsetRequest(group="billing", topic="Orders", offset=1)),
            (stub.UpdateDelayOffset, pb.UpdateDelayOffsetRequest(level=3, offset=1)),
            (stub.PopMessages, pb.PopMessagesRequest(group="billing", topic="Orders", queue_id=-1, max_count=1)),
            (stub.AckMessage, pb.AckMessageRequest(group="billing", topic="Orders", receipt_handle=handle)),
            (stub.AckMessages, pb.AckMessagesRequest(group="billing", topic="Orders", receipt_handles=[handle])),
            (
                stub.ChangeInvisibleDuration,
                pb.ChangeInvisibleDurationRequest(
                    group="billing", topic="Orders", receipt_handle=handle, invisible_duration_ms=1000
                ),
            ),
            (
                stub.ForwardToDeadLetterQueue,
                pb.ForwardToDeadLetterQueueRequest(group="billing", topic="Orders", receipt_handle=handle),
            ),
            (stub.PutUser, pb.PutUserRequest(user=pb.AuthUser(username="bob", password="x"))),
            (stub.DeleteUser, pb.DeleteUserRequest(username="alice")),
            (stub.PutAcl, pb.PutAclRequest(acl=pb.AuthAcl(username="alice"))),
        ]:
            _refused(call, request)
        # Reads stay allowed.
        listed = [t.topic_name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=5).topics]
        assert [name for name in listed if not is_system_topic(name)] == ["Orders"]
        assert stub.GetDelayOffset(pb.GetDelayOffsetRequest(level=3), timeout=5).offset == 42
    assert has_everything(slave.store) and config_files(slave) == before  # nothing changed
    with pytest.raises(NotMasterWriteError):
        slave.store.delete_topic("Orders")  # the core refuses too, before touching anything
    assert slave.store.topics.get("Orders") is not None


def test_a_restarted_slave_keeps_what_it_received(nodes, tmp_path):
    master = nodes(tmp_path / "a")
    slave = slave_of(master.address, nodes, tmp_path / "b")
    change_everything(master.store)
    wait_until(lambda: has_everything(slave.store))
    slave.stop()
    master.stop()
    alone = slave_of(NOBODY, nodes, tmp_path / "b")  # its master is gone: what it has is its files'
    assert has_everything(alone.store)


def test_publisher_sends_every_table_first_then_only_changed_ones_once_per_interval(tmp_path):
    clock = ManualClock()
    topics = TopicConfigManager(tmp_path / "m", clock)
    offsets = ConsumerOffsetManager(tmp_path / "m", clock)
    tables = ConfigTables([topics, offsets, DelayOffsetManager(tmp_path / "m", clock)], 200, clock)
    publisher = tables.publisher()
    assert [s.name for s in publisher.due()] == ["topics.json", "consumerOffset.json", "delayOffset.json"]
    for i in range(1000):  # a burst of commits
        offsets.commit_offset("g", "t", 0, i)
    assert publisher.due() == [] and publisher.wait_s() == pytest.approx(0.2)  # not before the interval
    clock.advance_ms(200)
    [snapshot] = publisher.due()
    assert snapshot.name == "consumerOffset.json" and b'"t@g":{0:999\n' in snapshot.content
    clock.advance_ms(200)
    assert publisher.due() == []  # nothing changed
    offsets.persist()  # a new dataVersion in the file: its bytes are sent again
    clock.advance_ms(200)
    [persisted] = publisher.due()
    assert persisted.content == offsets.path.read_bytes()
    # The slave's side: installed in memory and on disk; a file that does not decode changes nothing.
    slave_offsets = ConsumerOffsetManager(tmp_path / "s", clock)
    slave_tables = ConfigTables([slave_offsets], 200, clock)
    assert slave_tables.install(persisted.name, persisted.content, persisted.version)
    assert slave_offsets.query_offset("g", "t", 0) == 999 and slave_offsets.path.read_bytes() == persisted.content
    assert not slave_tables.install("consumerOffset.json", b"{not json", 9)
    assert not slave_tables.install("unknown.json", b"{}", 1)
    assert slave_offsets.query_offset("g", "t", 0) == 999 and slave_offsets.path.read_bytes() == persisted.content
    assert slave_tables.stats().snapshots_refused == 2


def _refuse() -> None:
    raise NotMasterWriteError("not the master: a test")


def test_a_guarded_table_refuses_changes_and_still_installs(tmp_path):
    clock = ManualClock()
    topics, groups = TopicConfigManager(tmp_path, clock), SubscriptionGroupManager(tmp_path, clock)
    auth, delay = AuthConfigManager(tmp_path, clock), DelayOffsetManager(tmp_path, clock)
    for table in (topics, groups, auth, delay):
        table.check_writable = _refuse
    for change in (
        lambda: topics.create_or_update(TopicConfig("T")),
        lambda: topics.delete("T"),
        lambda: groups.create_or_update(SubscriptionGroupConfig("g")),
        lambda: groups.delete("g"),
        lambda: auth.put_user(StoredUser("bob", "x")),
        lambda: auth.delete_user("bob"),
        lambda: auth.put_acl(StoredAcl("bob")),
        lambda: delay.update(1, 1),
    ):
        with pytest.raises(NotMasterWriteError):
            change()
    master = TopicConfigManager(tmp_path / "master", clock)
    master.create_or_update(TopicConfig("T"))
    count = topics.change_count
    topics.install(master.encode())  # replication still installs
    assert topics.change_count == count + 1 and topics.get("T") == master.get("T")
    assert topics.data_version == master.data_version
    assert not (tmp_path / "auth.json").exists() and not (tmp_path / "topics.json.tmp").exists()


# -- controller mode: a failover keeps the committed offsets ---------------------------------------

TTL_MS = 2000


@pytest.mark.needs("etcd")
def test_a_new_master_carries_on_the_old_ones_pop_state(etcd_server: EtcdCluster, tmp_path):  # noqa: F811
    """The committed offsets (config sync) and the deliveries in flight (the pop journal in the
    CommitLog): the new master answers the old handles and delivers nothing acknowledged again."""
    from services.store.ha.controller_mode import ControllerMode

    replicas: list[tuple[FileStore, grpc.Server]] = []

    def start(replica_id: int, port: int) -> FileStore:
        config = small_config(
            tmp_path / f"r{replica_id}",
            ha_send_heartbeat_interval_ms=100,
            ha_reconnect_interval_max_ms=200,
            ha_config_sync_interval_ms=50,
            port=port,
            store_host=f"127.0.0.1:{port}",
            replica_id=replica_id,
            etcd_endpoints=",".join(etcd_server.endpoints),
            lease_ttl_ms=TTL_MS,
            broker_role=BrokerRole.SYNC_MASTER,
            sync_replicas_timeout_ms=3000,
        )
        store = FileStore(config)
        store.start()
        server, _ = build_server(store, "127.0.0.1", port, max_workers=8)
        server.start()
        replicas.append((store, server))
        return store

    def writable_master(store: FileStore) -> bool:
        mode = store.replication.coordinator
        return store.replication.is_master and isinstance(mode, ControllerMode) and mode.writable()

    try:
        a_port, b_port = free_ports(2)
        a = start(0, a_port)
        wait_until(lambda: writable_master(a), timeout_s=10)
        b = start(1, b_port)
        mode = a.replication.coordinator
        assert isinstance(mode, ControllerMode)
        wait_until(lambda: mode.controller.view.state.in_sync == {0, 1}, timeout_s=10)
        for i in range(8):
            [result] = a.put_messages([message(queue_id=0, body=f"m{i}".encode())])
            assert result.ok, result
        popped = a.pop.pop("billing", "TopicTest", 0, 8, 60_000).messages
        assert [m.queue_offset for m in popped] == list(range(8))
        for m in popped[:5]:  # offsets 0-4 acked: committed 5; 5-7 in flight
            assert a.pop.ack("billing", "TopicTest", m.receipt_handle) is AckStatus.OK
        assert a.consumer_offsets.query_offset("billing", "TopicTest", 0) == 5
        wait_until(lambda: b.consumer_offsets.query_offset("billing", "TopicTest", 0) == 5)
        with pytest.raises(NotMasterWriteError):
            b.pop.pop("billing", "TopicTest", 0, 8, 60_000)
        store, server = replicas.pop(0)
        store.halt()  # as kill -9 (its lease expires), before its streams end: the set keeps b
        stop_server(server, grace_s=0)
        wait_until(lambda: writable_master(b), timeout_s=TTL_MS / 1000 + 5)
        assert b.consumer_offsets.query_offset("billing", "TopicTest", 0) == 5
        # 5-7 are still in flight under the handles the old master gave: nothing to pop, and the
        # consumer's acks land.
        assert b.pop.pop("billing", "TopicTest", 0, 8, 60_000).messages == []
        assert b.pop.ack("billing", "TopicTest", popped[5].receipt_handle) is AckStatus.OK
        assert b.pop.ack("billing", "TopicTest", popped[0].receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
        assert b.consumer_offsets.query_offset("billing", "TopicTest", 0) == 6
        [result] = b.put_messages([message(queue_id=0, body=b"m8")])
        assert result.ok, result
        wait_until(lambda: b.max_offset_in_queue("TopicTest", 0) == 9)
        assert [m.queue_offset for m in b.pop.pop("billing", "TopicTest", 0, 8, 60_000).messages] == [8]
    finally:
        for store, server in reversed(replicas):
            stop_server(server, grace_s=0)
            store.shutdown()
