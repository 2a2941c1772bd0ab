"""A ``Cluster`` (cluster.py) whose store is a replica set in controller mode: ``replicas`` store
processes (``store-0``, ``store-1``, ...), each ``python -m services.store`` with its own port
and data directory (``data_dir/replica-<i>``) and ``PYRMQ_STORE_ETCD_ENDPOINTS``,
``PYRMQ_STORE_REPLICA_ID``, ``PYRMQ_STORE_BROKER_ROLE`` (as services/launcher/topology.py builds them for
``pyrmq up --replicas N``); the broker, the scheduler and txcheck follow the group's master through
the same etcd (``PYRMQ_<SVC>_ETCD_ENDPOINTS``; their ``--store-address`` is then unused).

The test reads the group's keys from etcd (``group_state``: the master, its epoch, the
SyncStateSet, the live replicas), waits for every replica to be in sync before a fault
(``wait_in_sync``: only in-sync replicas can be elected, so killing the master of a set that is
the master alone would leave the group without one), kills the master with -9
(``kill_master``), waits for the new one (``wait_new_master``) and restarts the killed replica
with ``spawn("store-<id>")``: it rejoins as a slave.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import cast

from services.coordination.group_keys import GroupKeys
from services.coordination.group_state import GroupState
from services.runtime.etcd import Get
from services.runtime.etcd.rpc.client import EtcdClient
from tests.faults.cluster import Cluster, free_port
from tests.support.waits import wait_until

GROUP = "broker-a"  # the broker group (brokerName); the broker's, scheduler's and txcheck's default
POLL_S = 0.05


@dataclass
class ReplicaCluster(Cluster):
    """``start()`` brings up the store replicas, waits for a master, then the other services."""

    etcd_endpoints: str = ""
    replicas: int = 3
    broker_role: str = "SYNC_MASTER"  # how the master acks: SYNC_MASTER (all-ack) or ASYNC_MASTER
    replica_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.etcd_endpoints, "a replica set needs etcd"
        if not self.replica_ports:
            self.replica_ports = [free_port() for _ in range(self.replicas)]
        self.store_port = self.replica_ports[0]  # the others' --store-address (unused with etcd)
        self.services = (*(f"store-{i}" for i in range(self.replicas)), *self.services)

    @staticmethod
    def replica_id(name: str) -> int | None:
        return int(name.split("-", 1)[1]) if name.startswith("store-") else None

    def module(self, name: str) -> str:
        return "store" if self.replica_id(name) is not None else name

    def args(self, name: str) -> list[str]:
        i = self.replica_id(name)
        if i is None:
            return super().args(name)
        data_dir = self.data_dir / f"replica-{i}"
        extra = self.extra_args.get("store", [])
        return [
            sys.executable,
            "-m",
            "services.store",
            "--data-dir",
            str(data_dir),
            "--port",
            str(self.replica_ports[i]),
        ] + [
            "--metrics-port",
            "-1",
            *extra,
        ]

    def environment(self, name: str) -> dict[str, str]:
        i = self.replica_id(name)
        if i is not None:
            own = {
                "PYRMQ_STORE_ETCD_ENDPOINTS": self.etcd_endpoints,
                "PYRMQ_STORE_REPLICA_ID": str(i),
                "PYRMQ_STORE_BROKER_ROLE": self.broker_role,
                "PYRMQ_STORE_BROKER_NAME": GROUP,
            }
        else:
            own = {
                f"PYRMQ_{name.upper()}_ETCD_ENDPOINTS": self.etcd_endpoints,
                f"PYRMQ_{name.upper()}_BROKER_NAME": GROUP,
            }
        return {**self.env, **own}

    def start(self) -> ReplicaCluster:
        stores = [name for name in self.services if self.replica_id(name) is not None]
        for name in stores:
            self.spawn(name)
        self.wait_master(timeout_s=30.0)
        for name in self.services:
            if name not in stores:
                self.spawn(name)
        return self

    # -- the group, as etcd says
    def group_state(self) -> GroupState:
        keys = GroupKeys(GROUP)
        with EtcdClient(self.etcd_endpoints.split(","), timeout_s=5.0, attempt_timeout_s=1.0) as etcd:
            result = etcd.txn([], [Get(keys.root, prefix=True)])
        return GroupState.from_kvs(keys, result.results[0].kvs, result.revision)

    @staticmethod
    def live_master(state: GroupState) -> int | None:
        return state.master.masterBrokerId if state.master is not None and state.master_alive() else None

    def wait_master(self, timeout_s: float, other_than: int | None = None) -> tuple[int, float]:
        """(the live master's id, when this saw it), once there is one (other than ``other_than``)."""
        state = wait_until(
            self.group_state,
            timeout_s,
            f"a new master (other than {other_than})",
            describe=lambda: f"{self.group_state()}\n{self.logs()}",
            accept=lambda seen: self.live_master(seen) not in (None, other_than),
            pause_max_s=POLL_S,
        )
        return cast(int, self.live_master(state)), time.monotonic()

    def wait_in_sync(self, timeout_s: float) -> GroupState:
        """Until a live master's SyncStateSet holds every replica (each slave caught up)."""

        def all_in_sync(state: GroupState) -> bool:
            in_sync = state.sync_state.syncStateSet if state.sync_state is not None else frozenset()
            return self.live_master(state) is not None and len(in_sync) == self.replicas

        return wait_until(
            self.group_state,
            timeout_s,
            "every replica in sync",
            describe=lambda: f"{self.group_state()}\n{self.logs()}",
            accept=all_in_sync,
            pause_max_s=POLL_S,
        )

    def kill_master(self) -> int:
        """kill -9 of the live master; its id (restart it with ``spawn(f"store-{id}")``)."""
        master, _ = self.wait_master(timeout_s=10.0)
        self.kill(f"store-{master}")
        return master
