"""kill -9 of the MASTER of a store replica set (3 replicas in controller mode, one etcd member,
2 s leases) under send + receive load through the broker; the broker, scheduler and txcheck
follow the master through etcd (tests/faults/replica_cluster.py). Before each kill every replica
is in the SyncStateSet; after it the group elects a new master and the killed replica is
restarted, rejoining as a slave.

Asserts, SYNC_MASTER with all_ack_in_sync_state_set (services/store/README.md "Controller mode"):
0 acked lost (prefix, middle or suffix), 0 corrupt / unexpected / aborted, 0 FIFO order
violations, 0 inconsistent offsets, every delivered message consumer-acked after a drain, a new
master within ``NEW_MASTER_DEADLINE_S`` of each kill. Failover time (kill -> first OK send through
the broker) p50 / p99 is printed. DELAY messages across a kill: 0 lost, 0 early. ASYNC_MASTER
(slow): the loss is reported, as the suffix of each writer's sends acknowledged before each kill
(``History.check(split_at_faults=True)``), not asserted to be zero; any other violation fails.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.checker import OK, History, Report
from tests.faults.replica_cluster import ReplicaCluster
from tests.faults.workload import Workload, WorkloadConfig, seed_from_env
from tests.support.etcd import EtcdCluster
from tests.support.fault_runs import (
    DRAIN_TIMEOUT_S,
    check_run,
    first_ok_after,
    percentile,
    start_replica_cluster,
    wait_first_ok,
)
from tests.support.processes import Process

pytestmark = pytest.mark.needs("etcd")

NEW_MASTER_DEADLINE_S = 10.0  # kill -> a new master in etcd: the 2 s lease expiring, then one election
FIRST_OK_TIMEOUT_S = 20.0  # kill -> a send acknowledged through the broker
FAILOVER_P99_MAX_S = 10.0  # bench's target is 5 s on an idle machine; CI shares 2 cores with the suite
IN_SYNC_TIMEOUT_S = 40.0  # a restarted replica caught up and back in the SyncStateSet


@dataclass
class Run:
    history: History
    workload: Workload
    cluster: ReplicaCluster
    repro: str
    failover_s: list[float] = field(default_factory=list)  # kill -> first OK send
    elected_s: list[float] = field(default_factory=list)  # kill -> a new master seen in etcd
    pending_at_kill: list[int] = field(default_factory=list)  # DELAY messages acked, not yet due, at each kill
    drained: bool = False

    def figures(self) -> str:
        def p(values: list[float]) -> str:
            return f"p50 {percentile(values, 0.5):.3f} s, p99 {percentile(values, 0.99):.3f} s, max {max(values):.3f} s"

        return (
            f"{len(self.failover_s)} master kill(s): failover (kill -> first OK send) {p(self.failover_s)}; "
            f"kill -> new master in etcd {p(self.elected_s)}"
            + (f"; each failover s: {[round(x, 3) for x in self.failover_s]}" if len(self.failover_s) <= 10 else "")
        )


def kill_master_cycles(
    tmp_path: Path,
    processes: list[Process],
    etcd: EtcdCluster,
    test_id: str,
    cycles: int,
    config: WorkloadConfig,
    broker_role: str = "SYNC_MASTER",
    services: tuple[str, ...] = ("broker", "scheduler", "txcheck"),
    topics: tuple[tuple[str, str, str], ...] = (),
) -> Run:
    """Kill the master ``cycles`` times under ``config``'s load; stop sending and drain. The
    caller checks the history."""
    seed = seed_from_env()
    rng = random.Random(f"{seed}/faults")
    history = History(seed)
    cluster = start_replica_cluster(
        tmp_path, processes, ",".join(etcd.endpoints), broker_role=broker_role, services=services
    )
    for topic, message_type, group in topics:
        cluster.create_topic(topic, message_type)
        cluster.create_group(group)
    cluster.wait_in_sync(IN_SYNC_TIMEOUT_S)
    workload = Workload(cluster.endpoint, history, config).start()
    run = Run(history, workload, cluster, workload.repro(test_id))
    print(run.repro)
    try:
        wait_first_ok(history, 0.0)
        for cycle in range(cycles):
            cluster.wait_in_sync(IN_SYNC_TIMEOUT_S)
            time.sleep(rng.uniform(0.5, 1.5))  # the kill comes at a random moment of the load
            old = cluster.kill_master()
            fault = history.fault(f"master-{old}#{cycle}")
            now_ms = time.time() * 1000
            run.pending_at_kill.append(
                sum(1 for s in list(history.sends.values()) if s.outcome == OK and (s.deliver_at_ms or 0) > now_ms)
            )
            _, seen_t = cluster.wait_master(NEW_MASTER_DEADLINE_S, other_than=old)
            run.elected_s.append(seen_t - fault.fault_t)
            wait_first_ok(history, fault.fault_t, FIRST_OK_TIMEOUT_S)
            run.failover_s.append(first_ok_after(history, fault.fault_t) - fault.fault_t)
            history.restarted(fault)
            cluster.spawn(f"store-{old}")  # rejoins as a slave
            assert not workload.errors, f"{run.repro}\n{workload.errors}"
            if cycles > 10 and (cycle + 1) % 10 == 0:
                print(f"{cycle + 1} kills: {run.figures()}", flush=True)
        cluster.wait_in_sync(IN_SYNC_TIMEOUT_S)
        time.sleep(1.0)  # a last second of load on the group the kills left
        workload.stop_sending()
        run.drained = workload.drain(DRAIN_TIMEOUT_S) if broker_role == "SYNC_MASTER" else settle(history)
    finally:
        workload.stop()
    print(run.figures())
    return run


def settle(history: History, quiet_s: float = 5.0) -> bool:
    """Until every delivered message is acked and nothing more arrives for ``quiet_s`` (an ASYNC
    run may have lost messages, so ``Workload.drain`` would wait for them in vain)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        report = history.check()
        if report.delivered != seen:
            seen, since = report.delivered, time.monotonic()
        if not report.unconsumed and time.monotonic() - since >= quiet_s:
            return True
        time.sleep(0.2)  # paces the whole-history check while the quiet period runs on the real clock
    return False


def assert_sync_run(run: Run) -> Report:
    report, problems = check_run(run.history, run.workload, run.cluster, run.repro)
    assert run.drained, (
        f"{run.repro}\nnot drained in {DRAIN_TIMEOUT_S} s: {problems}; unconsumed {report.unconsumed[:10]}"
    )
    assert report.acked > 0 and report.delivered >= report.acked
    p99 = percentile(run.failover_s, 0.99)
    assert p99 <= FAILOVER_P99_MAX_S, f"{run.repro}\nfailover p99 {p99:.3f} s: {run.failover_s}"
    return report


def test_kill_9_master_sync_all_ack(tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster) -> None:
    """A master kill under NORMAL + FIFO load: nothing acknowledged is lost, FIFO order holds, the
    killed replica rejoins in sync (make soak kills the master 100 times)."""
    run = kill_master_cycles(
        tmp_path,
        processes,
        etcd_server,
        "tests/faults/test_kill_master.py::test_kill_9_master_sync_all_ack",
        cycles=1,
        config=WorkloadConfig(producers=2, fifo_producers=2, consumers=2),
    )
    assert_sync_run(run)
    run.cluster.stop()


def test_kill_9_master_with_delay_messages(tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster) -> None:
    """DELAY messages 2-5 s ahead across a master kill: none lost, none early."""
    run = kill_master_cycles(
        tmp_path,
        processes,
        etcd_server,
        "tests/faults/test_kill_master.py::test_kill_9_master_with_delay_messages",
        cycles=1,
        config=WorkloadConfig(
            topic="FaultsDelay",
            group="FaultsDelayGroup",
            producers=2,
            consumers=2,
            delay_s=(2.0, 5.0),
            send_pause_s=(0.005, 0.03),
        ),
        services=("broker", "scheduler"),
        topics=(("FaultsDelay", "DELAY", "FaultsDelayGroup"),),
    )
    assert all(run.pending_at_kill), f"{run.repro}\nno DELAY message was pending at a kill: {run.pending_at_kill}"
    report = assert_sync_run(run)
    assert not report.early
    run.cluster.stop()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_kill_9_master_sync_all_ack_soak(tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster) -> None:
    """100 master kills (issue 16's soak figure)."""
    run = kill_master_cycles(
        tmp_path,
        processes,
        etcd_server,
        "tests/faults/test_kill_master.py::test_kill_9_master_sync_all_ack_soak",
        cycles=100,
        config=WorkloadConfig(producers=4, fifo_producers=2, consumers=2),
    )
    assert_sync_run(run)
    run.cluster.stop()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_kill_9_master_async_reports_loss(tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster) -> None:
    """ASYNC_MASTER: a kill may lose the acknowledged tail the slaves had not received; the run
    reports it per kill as each writer's suffix before it (and fails on anything else)."""
    cycles = 100
    run = kill_master_cycles(
        tmp_path,
        processes,
        etcd_server,
        "tests/faults/test_kill_master.py::test_kill_9_master_async_reports_loss",
        cycles=cycles,
        config=WorkloadConfig(producers=4, fifo_producers=2, consumers=2),
        broker_role="ASYNC_MASTER",
    )
    report = run.history.check(split_at_faults=True)
    print(report.summary())
    assert not run.workload.errors, f"{run.repro}\n{run.workload.errors}"
    tails: dict[str, int] = {}
    for label in report.lost_suffix + report.lost_prefix:
        writer = label.split()[0].rsplit("-", 1)[0]
        tails[writer] = tails.get(writer, 0) + 1
    print(
        f"ASYNC, {cycles} master kills: {report.acked} acked, lost {len(report.lost)} "
        f"(as the tail before a kill: suffix {len(report.lost_suffix)}, whole part {len(report.lost_prefix)}; "
        f"per writer {dict(sorted(tails.items()))})"
    )
    other = {k: v for k, v in report.violations().items() if k not in ("lost-suffix", "lost-prefix")}
    assert not other, f"{run.repro}\n{report.describe()}"
    assert run.drained, f"{run.repro}\nunconsumed {report.unconsumed[:10]}"
    run.cluster.stop()
