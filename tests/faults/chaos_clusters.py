"""The clusters a chaos run (tests/faults/chaos.py) runs on, behind one interface (``ChaosCluster``):

* ``local``: one host's processes (tests/faults/replica_cluster.py): 3 etcd members, 3 store
  replicas in controller mode (SYNC_MASTER, all-ack, 2 s leases), a broker and the scheduler,
  all on loopback; the faults of tests/faults/process_faults.py (``LOCAL_FAULTS``).
* ``hosts``: tests/faults/hosts_cluster.py, each service on a network namespace of its own (3
  etcd members, 3 replicas, 2 brokers, the scheduler: the DELAY load); the faults of
  tests/faults/nemesis.py by chaos name (``hosts_fault_table``), each given the ``targets`` the
  schedule combines by (``Targeted``).

Each is a context manager that makes and removes everything it starts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tests.faults.process_faults import process_faults
from tests.faults.replica_cluster import GROUP, ReplicaCluster
from tests.faults.schedule import Fault
from tests.support import etcd as etcd_support
from tests.support.fault_runs import start_replica_cluster
from tests.support.processes import Process

if TYPE_CHECKING:  # the hosts modules are imported when the hosts cluster is used (they import pytest)
    from tests.faults.hosts_cluster import HostsCluster

log = logging.getLogger(__name__)

LOCAL_FAULTS = ("kill-master", "pause-master", "kill-slave", "kill-broker")
DELAY_TOPIC, DELAY_GROUP = "FaultsDelay", "FaultsDelayGroup"


class ChaosCluster(Protocol):
    """What a chaos run needs of a cluster (``LocalChaosCluster``, ``HostsChaosCluster``)."""

    endpoint: str  # the brokers' v2 endpoint for services/v2client (a gRPC target), reachable from here
    official_endpoint: str  # the same for the official client ("host:port;host:port")
    etcd_endpoints: list[str]
    delay_load: bool  # a scheduler runs: DELAY messages are delivered
    group: str  # the broker group (brokerName) the faults hit
    default_faults: tuple[str, ...]
    crashes: list[str]  # services found exited on their own between fault windows (a finding)

    def faults(self, names: Sequence[str]) -> list[Fault]: ...

    def ready(self, timeout_s: float) -> None: ...  # until every replica is in sync (or the timeout: logged)

    def logs(self) -> str: ...


# -- the local cluster


@dataclass
class LocalChaosCluster:
    replica: ReplicaCluster
    etcd: etcd_support.EtcdCluster
    group: str = GROUP
    default_faults: tuple[str, ...] = LOCAL_FAULTS
    delay_load: bool = True
    crashes: list[str] = field(default_factory=list)  # not looked for here: the hosts cluster's check

    @property
    def endpoint(self) -> str:
        return self.replica.endpoint

    @property
    def official_endpoint(self) -> str:
        return self.replica.endpoint

    @property
    def etcd_endpoints(self) -> list[str]:
        return self.etcd.endpoints

    def faults(self, names: Sequence[str]) -> list[Fault]:
        return list(process_faults(self.replica, tuple(names)))

    def ready(self, timeout_s: float) -> None:
        try:
            self.replica.wait_in_sync(timeout_s)
        except AssertionError as exc:
            log.warning("chaos: not every replica in sync after %.0f s; the fault goes ahead: %s", timeout_s, exc)

    def logs(self) -> str:
        return self.replica.logs(tail=20_000)


@contextlib.contextmanager
def local_chaos_cluster(work_dir: Path) -> Iterator[LocalChaosCluster]:
    """3 etcd members, 3 store replicas (SYNC_MASTER, all-ack, 2 s leases), a broker, the scheduler."""
    processes: list[Process] = []
    with contextlib.contextmanager(etcd_support.start_cluster)(work_dir, 3) as etcd:
        try:
            replica = start_replica_cluster(
                work_dir, processes, ",".join(etcd.endpoints), services=("broker", "scheduler")
            )
            replica.create_topic(DELAY_TOPIC, "DELAY")
            replica.create_group(DELAY_GROUP)
            yield LocalChaosCluster(replica, etcd)
        finally:
            for process in processes:
                process.kill()


def hosts_missing() -> str | None:
    """Why the hosts cluster cannot run here (None: it can)."""
    try:
        from tests.faults import hosts_cluster, nemesis  # noqa: F401 - present?
        from tests.support.netns import hosts_missing as netns_missing
    except ImportError as exc:
        return f"the hosts cluster is not there ({exc})"
    return netns_missing()


@dataclass
class Targeted:
    """A nemesis fault with the ``targets`` the schedule combines by (tests/faults/schedule.py)."""

    fault: Fault
    targets: frozenset[str]
    name: str = ""

    def apply(self) -> None:
        self.fault.apply()

    def heal(self) -> None:
        self.fault.heal()


def hosts_fault_table() -> dict[str, tuple[Callable[[HostsCluster], Fault], frozenset[str]]]:
    """The nemesis faults (tests/faults/nemesis.py) by chaos name, with what each acts on: faults on
    the master all act on "master" (never combined with each other), a clock jump on its host's
    clock, a broker fault on that broker."""

    from tests.faults import nemesis

    def on(*targets: str) -> frozenset[str]:
        return frozenset(targets)

    return {
        "kill-master": (lambda c: nemesis.Kill(c, "master"), on("master")),
        "pause-master": (lambda c: nemesis.Pause(c, "master"), on("master")),
        "partition-master-etcd": (nemesis.master_from_etcd, on("master")),
        "partition-master-slaves": (nemesis.master_from_slaves, on("master", "slave")),
        "isolate-master": (nemesis.master_isolated, on("master", "slave")),
        "split-etcd": (nemesis.etcd_split, on("master", "etcd")),
        "one-way-master-etcd": (nemesis.master_to_etcd_one_way, on("master")),
        "loss-master": (lambda c: nemesis.LinkLoss(c, "master", 20), on("master")),
        "delay-master-etcd": (lambda c: nemesis.LinkDelay(c, "master", 200, ("etcd",)), on("master")),
        "kill-slave": (lambda c: nemesis.Kill(c, "slave"), on("slave")),
        "pause-slave": (lambda c: nemesis.Pause(c, "slave"), on("slave")),
        "disk-full-slave": (lambda c: nemesis.DiskFull(c, "slave"), on("slave")),
        "kill-broker": (lambda c: nemesis.Kill(c, "broker-0"), on("broker-0")),
        "pause-broker": (lambda c: nemesis.Pause(c, "broker-1"), on("broker-1")),
        "kill-etcd-leader": (lambda c: nemesis.Kill(c, "etcd-leader"), on("etcd")),
        "clock-forward-master": (lambda c: nemesis.ClockJump(c, "master", 30.0), on("master-clock")),
        "clock-back-master": (lambda c: nemesis.ClockJump(c, "master", -30.0), on("master-clock")),
        "clock-back-broker": (lambda c: nemesis.ClockJump(c, "broker-0", -30.0), on("broker-0-clock")),
    }


@dataclass
class HostsChaosCluster:
    """tests/faults/hosts_cluster.py: 3 etcd members, 3 replicas, 2 brokers, each on a host of its
    own, and the scheduler on a host of its own (the DELAY load); the faults of
    tests/faults/nemesis.py."""

    cluster: HostsCluster
    group: str = GROUP
    delay_load: bool = False
    crashes: list[str] = field(default_factory=list)  # found by ready(): see _restart_crashed

    @property
    def default_faults(self) -> tuple[str, ...]:
        return tuple(hosts_fault_table())

    @property
    def endpoint(self) -> str:
        return self.cluster.endpoint

    @property
    def official_endpoint(self) -> str:
        return ";".join(self.cluster.broker_endpoints)

    @property
    def etcd_endpoints(self) -> list[str]:
        return self.cluster.etcd_endpoints

    def faults(self, names: Sequence[str]) -> list[Fault]:
        table = hosts_fault_table()
        unknown = [n for n in names if n not in table]
        if unknown:
            raise ValueError(f"unknown hosts faults {unknown}; known: {', '.join(table)}")
        return [Targeted(table[n][0](self.cluster), table[n][1], n) for n in names]

    def ready(self, timeout_s: float) -> None:
        self._restart_crashed()
        try:
            self.cluster.wait_in_sync(timeout_s)
        except AssertionError as exc:
            log.warning("chaos: not every replica in sync after %.0f s; the fault goes ahead: %s", timeout_s, exc)

    def logs(self) -> str:
        return self.cluster.logs(tail=20_000)

    def _restart_crashed(self) -> None:
        """Between fault windows every fault is healed (a killed service restarted): a service
        that is not running exited on its own. That is noted (the run fails on it) with its exit
        code and its log, and it is started again, so the schedule goes on against a whole
        cluster instead of waiting for a replica that never comes back."""
        for name in self.cluster.config.names():
            if name in self.cluster.running and not self.cluster.alive(name):
                code = self.cluster.running[name].popen.returncode
                log.error(
                    "chaos: %s exited on its own (code %s); starting it again. Its log:\n%s",
                    name,
                    code,
                    self.cluster.log(name, 8000),
                )
                self.crashes.append(f"{name} exited on its own (code {code})")
                self.cluster.restart(name)


@contextlib.contextmanager
def hosts_chaos_cluster(work_dir: Path) -> Iterator[HostsChaosCluster]:
    """The hosts cluster, made and removed here (namespaces, tmpfs mounts, processes)."""
    from tests.faults.hosts_cluster import HostsCluster, HostsClusterConfig
    from tests.support.netns import Hosts

    config = HostsClusterConfig(schedulers=1)
    with Hosts(config.names()) as hosts:
        cluster = HostsCluster(hosts, config)
        try:
            cluster.start()
            cluster.create_topic(DELAY_TOPIC, "DELAY")
            yield HostsChaosCluster(cluster, delay_load=True)
        finally:
            cluster.close()
