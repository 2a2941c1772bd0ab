"""Each fault of the nemesis (tests/faults/nemesis.py) once, against one cluster spread over test
hosts (tests/faults/hosts_cluster.py: 3 etcd members, 3 store replicas in controller mode with
SYNC_MASTER and 2 s leases, 2 brokers; clients in the root namespace, through the brokers with
the v2 client: tests/faults/workload.py), one fault after the other.

Every scenario: the whole group in sync, a small NORMAL + FIFO load, the fault applied and held
(until its effect shows: a new master, or a few seconds), healed; then a send must be
acknowledged within ``SERVE_AFTER_HEAL_S`` of the heal, the load stops, everything is drained,
and the checker (tests/faults/checker.py) must find nothing lost, corrupt, unexpected, aborted,
out of order or acknowledged by a fenced master; the group must get every replica back in sync.
Each prints ``repro: PYRMQ_FAULTS_SEED=...``.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import signal
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as store_pb
from pyrmq.store.v1 import store_pb2_grpc as store_grpc

from tests.faults.chaos import RoleRecorder
from tests.faults.chaos_clusters import HostsChaosCluster
from tests.faults.checker import History, Report
from tests.faults.hosts_cluster import HostsCluster, HostsClusterConfig
from tests.faults.nemesis import (
    ClockJump,
    Compose,
    DiskFull,
    Fault,
    Kill,
    LinkDelay,
    LinkLoss,
    Pause,
    etcd_member_cut,
    etcd_split,
    master_from_etcd,
    master_from_slaves,
    master_to_etcd_one_way,
)
from tests.faults.workload import Workload, WorkloadConfig, seed_from_env
from tests.support.fault_runs import check_run, wait_first_ok
from tests.support.netns import Hosts, require_hosts
from tests.support.waits import wait_until

pytestmark = [pytest.mark.needs("etcd"), pytest.mark.timeout(600)]

NEW_MASTER_S = 15.0  # fault -> a new master in etcd (a 2 s lease, then an election)
SERVE_AFTER_HEAL_S = 20.0  # heal -> a send acknowledged through a broker
IN_SYNC_S = 40.0  # every replica back in the SyncStateSet
DRAIN_S = 30.0
LOAD = WorkloadConfig(producers=2, fifo_producers=1, groups_per_fifo_producer=2, consumers=1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[HostsCluster]:
    require_hosts()
    config = HostsClusterConfig()
    with Hosts(config.names()) as hosts:
        made = HostsCluster(hosts, config)
        try:
            made.start()
            yield made
        finally:
            made.close()


def run_fault(cluster: HostsCluster, fault: Fault, hold: Callable[[History], object], test_id: str) -> Report:
    """The scenario of the module docstring; ``hold(history)`` returns when the fault has held
    long enough (it may look at what the clients saw so far)."""
    cluster.wait_in_sync(IN_SYNC_S)
    seed = seed_from_env()
    history = History(seed)
    roles = RoleRecorder(cluster.etcd_endpoints, cluster.group, history).start()  # for the fenced check
    workload = Workload(cluster.endpoint, history, fresh_load(cluster)).start()
    repro = workload.repro(test_id)
    print(repro)
    try:
        wait_first_ok(history, 0.0)
        time.sleep(random.Random(f"{seed}/fault").uniform(0.3, 0.8))  # the fault comes at a random moment of the load
        fault.apply()
        record = history.fault(fault.name)
        try:
            hold(history)
        finally:
            fault.heal()
        history.healed(record)
        history.restarted(record)
        healed_t = time.monotonic()
        wait_first_ok(history, healed_t, SERVE_AFTER_HEAL_S)
        workload.stop_sending()
        drained = workload.drain(DRAIN_S)
    except AssertionError as exc:
        raise AssertionError(f"{repro}\n{exc}\n{history.check().summary()}\n{cluster.logs()}") from exc
    finally:
        workload.stop()
        roles.stop()
    applied = getattr(fault, "applied", "")
    print(f"{fault.name} ({applied}): served again {first_ok_s(history, healed_t):.2f} s after the heal")
    report, problems = check_run(history, workload, cluster, repro)  # type: ignore[arg-type]
    assert drained, (
        f"{repro}\nnot drained in {DRAIN_S} s: {problems}\nunconsumed {report.unconsumed[:10]}\n{cluster.logs()}"
    )
    assert report.acked > 0
    cluster.wait_in_sync(IN_SYNC_S)
    return report


_scenarios = itertools.count()


def fresh_load(cluster: HostsCluster) -> WorkloadConfig:
    """LOAD on topics and groups of the scenario's own: what an earlier scenario left (it failed
    before its drain) is not this one's to judge."""
    k = next(_scenarios)
    config = dataclasses.replace(
        LOAD, topic=f"Hosts{k}", group=f"Hosts{k}Group", fifo_topic=f"Hosts{k}Fifo", fifo_group=f"Hosts{k}FifoGroup"
    )
    cluster.create_topic(config.topic, "NORMAL")
    cluster.create_topic(config.fifo_topic, "FIFO")
    cluster.create_group(config.group)
    cluster.create_group(config.fifo_group, fifo=True)
    return config


def first_ok_s(history: History, after_t: float) -> float:
    return min(s.complete_t for s in history.sends.values() if s.outcome == "ok" and s.complete_t > after_t) - after_t


def delivery_story(history: History, message_id: str) -> str:
    """What the clients saw of one message: each delivery (attempt, when, relative to the first)
    and what became of its acks (a message delivered twice in a run without a reason: seen once,
    not traced)."""
    deliveries = [d for d in history.deliveries if d.message_id == message_id]
    first_t = deliveries[0].t if deliveries else 0.0
    seen = ", ".join(f"attempt {d.attempt} at +{d.t - first_t:.2f} s" for d in deliveries)
    ack = "acked" if message_id in history.acked_ids else "never acked"
    if message_id in history.ack_unknown_ids:
        ack += ", an ack failed in transport"
    return f"\n  {message_id}: {seen}; {ack}"


def hold_s(seconds: float) -> Callable[[History], None]:
    """Hold a fault this long (the real clock must pass: a lease, the SyncStateSet's catch-up limit)."""
    return lambda _history: time.sleep(seconds)


def hold_until_new_master(
    cluster: HostsCluster, old: int, extra_s: float = 1.0, timeout_s: float = NEW_MASTER_S
) -> Callable[[History], None]:
    """Hold until etcd names a master other than ``old``, then ``extra_s`` more (the old master,
    if it still runs, has that long to acknowledge what it must not)."""

    def hold(_history: History) -> None:
        cluster.wait_new_master(old, timeout_s)
        time.sleep(extra_s)

    return hold


TEST = "tests/faults/test_hosts_faults.py::"


# First in the module: every replica and broker still follows etcd through etcd-0 (the first
# endpoint; no earlier fault moved them), the member this cuts off.
def test_etcd_member_cut_from_the_group_then_master_killed(cluster: HostsCluster) -> None:
    """etcd-0 unreachable from every store and broker (etcd keeps its quorum without it), then
    kill -9 of the master: the slaves must elect a new one through the other members."""
    old = cluster.wait_master(10.0)
    fault = Compose([etcd_member_cut(cluster, "etcd-0"), Kill(cluster, "master")])
    run_fault(
        cluster,
        fault,
        hold_until_new_master(cluster, old, 0.0, 10.0),
        TEST + "test_etcd_member_cut_from_the_group_then_master_killed",
    )


def test_partition_etcd_minority_with_the_master(cluster: HostsCluster) -> None:
    """The etcd leader (moved to etcd-2 first: the group follows etcd-0) and the master on the
    minority side: the majority elects an etcd leader and a new master; the old one cannot renew
    its lease."""
    cluster.move_etcd_leader(2)
    old = cluster.wait_master(10.0)
    fault = etcd_split(cluster, "etcd-2")
    run_fault(
        cluster, fault, hold_until_new_master(cluster, old), TEST + "test_partition_etcd_minority_with_the_master"
    )


def test_partition_master_from_etcd(cluster: HostsCluster) -> None:
    """The master loses its lease (it still reaches its slaves and the brokers): a slave is
    elected, the old master stops acknowledging, and rejoins as a slave once healed."""
    old = cluster.wait_master(10.0)
    run_fault(
        cluster,
        master_from_etcd(cluster),
        hold_until_new_master(cluster, old),
        TEST + "test_partition_master_from_etcd",
    )


def test_partition_master_to_etcd_one_way(cluster: HostsCluster) -> None:
    """The master hears etcd but etcd never hears it: the same as a lost lease."""
    old = cluster.wait_master(10.0)
    run_fault(
        cluster,
        master_to_etcd_one_way(cluster),
        hold_until_new_master(cluster, old),
        TEST + "test_partition_master_to_etcd_one_way",
    )


def test_partition_master_from_slaves(cluster: HostsCluster) -> None:
    """SYNC puts wait for slaves they cannot reach, until the slaves leave the SyncStateSet
    (``ha_max_time_slave_not_catchup_ms``, 3 s here); then they catch up after the heal."""
    run_fault(cluster, master_from_slaves(cluster), hold_s(4.0), TEST + "test_partition_master_from_slaves")


def test_link_loss_on_the_master(cluster: HostsCluster) -> None:
    """20 % of every packet to and from the master dropped for 3 s."""
    run_fault(cluster, LinkLoss(cluster, "master", 20), hold_s(3.0), TEST + "test_link_loss_on_the_master")


def test_link_delay_master_to_brokers_and_slaves(cluster: HostsCluster) -> None:
    """The master's connections to the brokers and its slaves delayed 100 ms each way for 3 s."""
    fault = LinkDelay(cluster, "master", 100, peers=("broker", "slave"))
    run_fault(cluster, fault, hold_s(3.0), TEST + "test_link_delay_master_to_brokers_and_slaves")


def test_pause_master_past_its_lease(cluster: HostsCluster) -> None:
    """SIGSTOP of the master until a new one is elected; after SIGCONT it wakes up believing it is
    master, must acknowledge nothing, and rejoins as a slave."""
    old = cluster.wait_master(10.0)
    run_fault(
        cluster,
        Pause(cluster, "master"),
        hold_until_new_master(cluster, old),
        TEST + "test_pause_master_past_its_lease",
    )


@dataclasses.dataclass
class _Reported:
    """Not a fault: ``apply`` waits until etcd shows the replica hit by ``full`` reporting its
    disk full (a replica publishes it every 0.2 s), so the next fault meets a group that knows."""

    cluster: HostsCluster
    full: DiskFull
    name: str = "reported"

    def apply(self) -> None:
        replica = int(self.full.applied.split("-")[1])
        wait_until(
            lambda: (
                (state := self.cluster.group_state()).replicas.get(replica) is not None
                and state.replicas[replica].info.diskFull
            ),
            10.0,
            f"{self.full.applied} reporting its disk full",
        )

    def heal(self) -> None:
        pass


def test_pause_master_with_a_slave_disk_full(cluster: HostsCluster) -> None:
    """Two of three replicas impaired at once: the first slave's disk full, then the master paused
    past its lease. The other slave must be elected (the full one would refuse every put as
    master: the 20-minute chaos run elected it, and nothing was acknowledged for 9.9 s until the
    space came back) and take puts while the disk is still full."""
    old = cluster.wait_master(10.0)
    full = DiskFull(cluster, "slave")
    fault = Compose([full, _Reported(cluster, full), Pause(cluster, "master")])

    def hold(_history: History) -> None:
        new = cluster.wait_new_master(old, NEW_MASTER_S)
        assert f"store-{new}" != full.applied, f"{full.applied}, whose disk is full, was elected"
        with grpc.insecure_channel(cluster.store_address(new)) as channel:
            stub = store_grpc.StoreStub(channel)
            wait_until(lambda: put_one(stub, "DiskFullProbe") == "PUT_OK", 5.0, f"store-{new} taking puts")

    run_fault(cluster, fault, hold, TEST + "test_pause_master_with_a_slave_disk_full")


def test_pause_a_broker_and_every_producer_goes_on_through_the_other(cluster: HostsCluster) -> None:
    """SIGSTOP of broker-0: its kernel keeps the clients' TCP connections up, so only HTTP/2 pings
    tell it is gone (services/v2client: keepalive pings, then pick_first connects to broker-1).
    Every producer must have a send acknowledged while it is still paused (without pings, the
    chaos run's clients waited for the broker to resume: 4-6 s)."""
    fault = Pause(cluster, "broker-0")

    def hold(history: History) -> None:
        paused_t = time.monotonic()
        writers = {s.writer for s in history.sends.values()}

        def acked_since() -> set[str]:
            return {s.writer for s in list(history.sends.values()) if s.outcome == "ok" and s.invoke_t > paused_t}

        wait_until(lambda: acked_since() >= writers, 15.0, f"every producer of {sorted(writers)} acked while paused")

    run_fault(cluster, fault, hold, TEST + "test_pause_a_broker_and_every_producer_goes_on_through_the_other")


def test_kill_master_and_restart(cluster: HostsCluster) -> None:
    old = cluster.wait_master(10.0)
    run_fault(
        cluster,
        Kill(cluster, "master"),
        hold_until_new_master(cluster, old, 0.0),
        TEST + "test_kill_master_and_restart",
    )


def test_clock_jumps_forward_on_the_master_and_back_on_a_broker(cluster: HostsCluster) -> None:
    """The master's wall clock +30 s, broker-0's -30 s, for 3 s; then back."""
    fault = Compose([ClockJump(cluster, "master", 30.0), ClockJump(cluster, "broker-0", -30.0)])
    seen: list[History] = []

    def hold(history: History) -> None:
        seen.append(history)
        time.sleep(3.0)

    report = run_fault(cluster, fault, hold, TEST + "test_clock_jumps_forward_on_the_master_and_back_on_a_broker")
    # The store runs on a steady clock: the jump does not expire the receipts in flight (10 s
    # invisible) at once, so nothing is delivered again.
    assert report.redeliveries == {}, report.summary() + "".join(
        delivery_story(seen[0], i) for i in report.redeliveries
    )


def test_disk_full_on_the_master(cluster: HostsCluster) -> None:
    """The master's filesystem 95 % full for 3 s (past the store's 90 % mark: puts refused, never
    acknowledged and then lost; room left for new ConsumeQueue files), served again once the
    space is back, without a restart."""
    fault = DiskFull(cluster, "master", leave_bytes=cluster.config.disk_bytes // 20)
    run_fault(cluster, fault, hold_s(3.0), TEST + "test_disk_full_on_the_master")


def test_chaos_notes_and_restarts_a_service_that_exited_on_its_own(cluster: HostsCluster) -> None:
    """make chaos between fault windows (tests/faults/chaos_clusters.py): a service not running
    though no fault holds it down is a finding (a slave died during a run, and the schedule then
    waited 40 s before every window for a replica that never came back)."""
    chaos = HostsChaosCluster(cluster)
    cluster.kill("broker-1")  # not through a fault: nothing will restart it
    chaos.ready(IN_SYNC_S)
    assert chaos.crashes == [f"broker-1 exited on its own (code {-signal.SIGKILL})"]
    assert cluster.alive("broker-1")
    chaos.ready(IN_SYNC_S)
    assert len(chaos.crashes) == 1


# Last in the module: the master it leaves behind is restarted.
def test_disk_full_to_the_last_byte_then_space_back(cluster: HostsCluster) -> None:
    """The master's filesystem full to the last byte while a put to a new queue is accepted (its
    CommitLog segment was allocated before): once the space is back the message must become
    readable, without a restart."""
    master = cluster.wait_master(10.0)
    name = f"store-{master}"
    fault = DiskFull(cluster, name)
    with grpc.insecure_channel(cluster.store_address(master)) as channel:
        stub = store_grpc.StoreStub(channel)
        topic = ""
        try:
            for attempt in range(3):  # the store notices a full disk within a second: then it refuses
                topic = f"DiskFullNew{attempt}"
                cluster.create_topic(topic)  # its ConsumeQueue files are made at its first dispatch
                fault.apply()
                status = put_one(stub, topic)
                if status == "PUT_OK":
                    break
                fault.heal()
                wait_until(lambda: put_one(stub, "DiskFullProbe") == "PUT_OK", 10.0, "puts accepted again")
            else:
                pytest.fail(f"no put accepted on a full disk in 3 tries (last: {status})")
            # Until the store has seen the full disk (it checks every second): then space comes back.
            wait_until(lambda: put_one(stub, "DiskFullProbe") != "PUT_OK", 10.0, "puts refused on the full disk")
            fault.heal()
            wait_until(lambda: readable(stub, topic), 5.0, f"{topic}'s message readable after the space came back")
        finally:
            fault.heal()
            if topic and not readable(stub, topic):
                cluster.kill(name)  # a restart dispatches again: leave a working group behind
                cluster.restart(name)
                cluster.wait_in_sync(IN_SYNC_S)


def put_one(stub: store_grpc.StoreStub, topic: str) -> str:
    """One message put straight to a store replica: its status name, or the gRPC code's."""
    request = store_pb.PutMessagesRequest(messages=[store_pb.Message(topic=topic, queue_id=0, body=b"disk-full")])
    try:
        [result] = stub.PutMessages(request, timeout=10).results
    except grpc.RpcError as exc:
        return f"grpc:{exc.code().name}"
    return store_pb.PutStatus.Name(result.status)


def readable(stub: store_grpc.StoreStub, topic: str) -> bool:
    request = store_pb.GetMessagesRequest(topic=topic, queue_id=0, queue_offset=0, max_count=1)
    try:
        return len(stub.GetMessages(request, timeout=5).messages) > 0
    except grpc.RpcError:
        return False
