"""A broker group of real store replicas in controller mode (real gRPC servers, one real etcd
from tests/support/etcd.py): ``ReplicaGroup(etcd, root).make(count, **overrides)`` gives
replicas 0..count-1, not started; ``close()`` stops them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from services.domain.statuses import PutStatus
from services.runtime.process import free_ports
from services.store.config import BrokerRole, StoreConfig
from services.store.ha.controller_mode import ControllerMode
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.etcd import EtcdCluster
from tests.support.filestore import message, small_config
from tests.support.waits import wait_until

SEGMENT_BYTES = 16 * 1024
TTL_MS = 2000


@dataclass
class Replica:
    config: StoreConfig
    store: FileStore | None = None
    server: grpc.Server | None = None

    @property
    def live(self) -> FileStore:
        assert self.store is not None
        return self.store

    @property
    def mode(self) -> ControllerMode:
        coordinator = self.live.replication.coordinator
        assert isinstance(coordinator, ControllerMode)
        return coordinator

    @property
    def address(self) -> str:
        return self.config.store_host or f"127.0.0.1:{self.config.port}"

    def start(self) -> Replica:
        store = FileStore(self.config)
        store.start()
        server, _ = build_server(store, "127.0.0.1", self.config.port, max_workers=8)
        server.start()
        self.store, self.server = store, server
        return self

    def kill(self) -> None:
        """As kill -9: its controller first says nothing more (no last shrink of the set when
        the slaves' streams drop), connections dropped, the lease left to expire."""
        assert self.server is not None
        coordinator = self.live.replication.coordinator
        if coordinator is not None:
            coordinator.halt()
        stop_server(self.server, grace_s=0)
        self.live.halt()

    def stop(self) -> None:
        if self.server is not None:
            stop_server(self.server, grace_s=0)
        if self.store is not None:
            self.store.shutdown()


@dataclass
class ReplicaGroup:
    etcd: EtcdCluster
    root: Path
    made: list[Replica] = field(default_factory=list)

    def make(self, count: int, **overrides: object) -> list[Replica]:
        for port in free_ports(count):
            i = len(self.made)
            values: dict[str, object] = dict(
                commitlog_file_size_bytes=SEGMENT_BYTES,
                ha_send_heartbeat_interval_ms=100,
                ha_reconnect_interval_max_ms=200,
                port=port,
                store_host=f"127.0.0.1:{port}",
                replica_id=i,
                etcd_endpoints=",".join(self.etcd.endpoints),
                lease_ttl_ms=TTL_MS,
                broker_role=BrokerRole.SYNC_MASTER,
                sync_replicas_timeout_ms=3000,
            )
            values.update(overrides)
            self.made.append(Replica(small_config(self.root / f"r{i}", **values)))
        return self.made[-count:]

    def close(self) -> None:
        for replica in reversed(self.made):
            replica.stop()


def put(store: FileStore, count: int, tag: str = "m") -> PutStatus:
    """``count`` single-message puts; the first status that is not PUT_OK, else PUT_OK."""
    status = PutStatus.PUT_OK
    for i in range(count):
        [result] = store.put_messages([message(queue_id=i % 4, body=f"{tag}-{i}".encode() * 40, keys=f"{tag}{i}")])
        status = result.status
        if status is not PutStatus.PUT_OK:
            return status
    return status


def wait_master(replica: Replica, timeout_s: float = 10) -> None:
    wait_until(lambda: replica.live.replication.is_master and replica.mode.writable(), timeout_s=timeout_s)


def in_sync(replica: Replica) -> frozenset[int]:
    return replica.mode.controller.view.state.in_sync
