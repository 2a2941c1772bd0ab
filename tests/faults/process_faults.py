"""Faults on the processes of one host's cluster (tests/faults/replica_cluster.py), with the
nemesis interface (``name``, ``targets``, ``apply()``, ``heal()``: tests/faults/schedule.py), so a
schedule runs without network namespaces:

* ``KillProcess``: kill -9, waiting until the process is gone; heal starts it again (a store
  replica rejoins its group, as a slave if another was elected meanwhile).
* ``PauseProcess``: SIGSTOP, returning once the kernel shows the process stopped; heal is
  SIGCONT. A master paused past its 2 s lease is the zombie of issue 30: the group elects
  another, and the one that wakes must acknowledge nothing more.

The target is resolved when the fault is applied: ``"master"`` is the group's live master as
etcd says (waiting for one up to ``master_timeout_s``), ``"slave"`` the first live replica that
is not, anything else a service of the cluster by name (``"broker"``, ``"scheduler"``,
``"store-1"``). Heal is idempotent: it undoes what the last apply did, once.
"""

from __future__ import annotations

import os
import signal

from tests.faults.replica_cluster import ReplicaCluster
from tests.support.processes import sigstop

STOPPED_WAIT_S = 5.0


def resolve(cluster: ReplicaCluster, target: str, master_timeout_s: float) -> str:
    """The service name of ``target`` right now (module docstring)."""
    if target not in ("master", "slave"):
        if target not in cluster.running:
            raise ValueError(f"no service {target!r} in the cluster: {sorted(cluster.running)}")
        return target
    master, _ = cluster.wait_master(master_timeout_s)
    if target == "master":
        return f"store-{master}"
    slaves = sorted(
        name
        for name, service in cluster.running.items()
        if cluster.replica_id(name) not in (None, master) and service.process.popen.poll() is None
    )
    if not slaves:
        raise RuntimeError(f"no live slave to fault (master {master}, running {sorted(cluster.running)})")
    return slaves[0]


class KillProcess:
    """kill -9 of ``target``; heal restarts it."""

    def __init__(self, cluster: ReplicaCluster, target: str = "master", master_timeout_s: float = 10.0) -> None:
        self.name = f"kill-{target}"
        self.targets = frozenset({target})
        self.cluster = cluster
        self.target = target
        self.master_timeout_s = master_timeout_s
        self.killed: str | None = None  # the service this fault took down, until healed

    def apply(self) -> None:
        victim = resolve(self.cluster, self.target, self.master_timeout_s)
        self.cluster.kill(victim)
        self.killed = victim

    def heal(self) -> None:
        if self.killed is not None:
            self.cluster.spawn(self.killed)  # waits for its ready line
            self.killed = None


class PauseProcess:
    """SIGSTOP of ``target``; heal is SIGCONT."""

    def __init__(self, cluster: ReplicaCluster, target: str = "master", master_timeout_s: float = 10.0) -> None:
        self.name = f"pause-{target}"
        self.targets = frozenset({target})
        self.cluster = cluster
        self.target = target
        self.master_timeout_s = master_timeout_s
        self.paused_pid: int | None = None

    def apply(self) -> None:
        victim = resolve(self.cluster, self.target, self.master_timeout_s)
        pid = self.cluster.running[victim].process.popen.pid
        self.paused_pid = pid
        sigstop(pid, victim, STOPPED_WAIT_S)

    def heal(self) -> None:
        pid, self.paused_pid = self.paused_pid, None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # it died meanwhile (another fault killed it): nothing to resume
                pass


def process_faults(cluster: ReplicaCluster, names: tuple[str, ...]) -> list[KillProcess | PauseProcess]:
    """Faults by name: ``kill-<target>`` or ``pause-<target>`` (``kill-master``, ``pause-broker``)."""
    kinds = {"kill": KillProcess, "pause": PauseProcess}
    faults: list[KillProcess | PauseProcess] = []
    for name in names:
        kind, _, target = name.partition("-")
        if kind not in kinds or not target:
            raise ValueError(f"fault {name!r}: expected kill-<target> or pause-<target>")
        faults.append(kinds[kind](cluster, target))
    return faults
