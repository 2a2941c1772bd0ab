"""A kill -9 faults run (tests/faults): ``start_cluster`` (the service processes with the faults
topics and groups, SYNC flush; ``start_replica_cluster`` the same with the store a replica set
in controller mode), ``wait_first_ok`` / ``first_ok_after`` (the first send
acknowledged after a moment), ``check_run`` (the checker's verdict, failing on any violation)
and ``DRAIN_TIMEOUT_S``. The cluster, the workload and the checker are tests/faults/cluster.py,
workload.py and checker.py."""

from __future__ import annotations

from pathlib import Path

from tests.faults.checker import History, Report
from tests.faults.cluster import Cluster
from tests.faults.replica_cluster import ReplicaCluster
from tests.faults.workload import Workload
from tests.support.processes import Process
from tests.support.waits import wait_until

DRAIN_TIMEOUT_S = 40.0


def start_cluster(
    tmp_path: Path,
    processes: list[Process],
    services=("store", "broker", "scheduler", "txcheck"),
    extra_args: dict[str, list[str]] | None = None,
    **env: str,
) -> Cluster:
    cluster = Cluster(
        tmp_path / "data",
        processes,
        services=services,
        extra_args=extra_args or {},
        env={"PYRMQ_STORE_FLUSH_MODE": "SYNC", **env},
    ).start()
    return create_faults_resources(cluster)


def start_replica_cluster(
    tmp_path: Path,
    processes: list[Process],
    etcd_endpoints: str,
    broker_role: str = "SYNC_MASTER",
    services=("broker", "scheduler", "txcheck"),
    replicas: int = 3,
    **env: str,
) -> ReplicaCluster:
    """``start_cluster`` with the store a replica set (tests/faults/replica_cluster.py)."""
    cluster = ReplicaCluster(
        tmp_path / "data",
        processes,
        services=services,
        env={"PYRMQ_STORE_FLUSH_MODE": "SYNC", **env},
        etcd_endpoints=etcd_endpoints,
        replicas=replicas,
        broker_role=broker_role,
    ).start()
    create_faults_resources(cluster)
    return cluster


def create_faults_resources(cluster: Cluster) -> Cluster:
    cluster.create_topic("FaultsNormal", "NORMAL")
    cluster.create_topic("FaultsFifo", "FIFO")
    cluster.create_group("FaultsGroup")
    cluster.create_group("FaultsFifoGroup", fifo=True)
    return cluster


def check_run(history: History, workload: Workload, cluster: Cluster, repro: str) -> tuple[Report, str]:
    """The checker's report of a finished run, printed; fails on workload errors or any
    violation (lost, corrupt, unexpected, aborted, order, offsets), naming the repro."""
    report = history.check()
    print(report.summary())
    problems = report.describe()
    assert not workload.errors, f"{repro}\n{workload.errors}"
    assert not report.violations(), f"{repro}\n{problems}\n{cluster.logs()}"
    return report, problems


def wait_first_ok(history: History, after_t: float, timeout_s: float = 30.0) -> None:
    wait_until(
        lambda: any(s.outcome == "ok" and s.complete_t > after_t for s in list(history.sends.values())[-200:]),
        timeout_s,
        "a send acknowledged",
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def first_ok_after(history: History, t: float) -> float:
    """Completion time of the first ok send completed after ``t`` (wait_first_ok saw one)."""
    return min(s.complete_t for s in list(history.sends.values()) if s.outcome == "ok" and s.complete_t > t)
