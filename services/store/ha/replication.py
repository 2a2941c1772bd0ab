"""A store's replication role, wired into FileStore at start (static roles from StoreConfig
until the controller assigns them; the controller will also supply the epoch).

* A master (ASYNC_MASTER, SYNC_MASTER) records a new epoch when it starts: the last epoch + 1,
  from its max phy_offset (from its min offset when the file is empty: everything before
  was written by this store alone). It owns an ``HAService`` that the ``Replicate`` stream
  serves slaves from; ``after_append`` wakes those streams and, for a SYNC_MASTER, waits for
  the slaves' confirmations (FLUSH_SLAVE_TIMEOUT after sync_replicas_timeout_ms).
* A slave refuses puts (``is_slave``) and runs a ``ReplicationConnection`` to
  ha_master_address.
"""

from __future__ import annotations

from typing import Protocol

from services.runtime.clock import Clock
from services.store.checkpoint import CheckpointFile
from services.store.client.replication import ReplicationConnection
from services.store.commitlog import CommitLog
from services.store.config import BrokerRole, StoreConfig
from services.store.consume_queue import ConsumeQueueStore
from services.store.epoch_file import EpochFile
from services.store.ha.ha_client import HAClient
from services.store.ha.ha_service import HAService
from services.store.index_service import IndexService
from services.store.replica_log import ReplicaLog
from services.store.reput import ReputService
from services.store.transaction_metrics import TransactionMetrics


class StoreParts(Protocol):
    """The parts of a started FileStore that replication works on."""

    @property
    def config(self) -> StoreConfig: ...
    @property
    def commitlog(self) -> CommitLog: ...
    @property
    def cq_store(self) -> ConsumeQueueStore: ...
    @property
    def index_service(self) -> IndexService | None: ...
    @property
    def reput(self) -> ReputService | None: ...
    @property
    def checkpoint(self) -> CheckpointFile | None: ...
    @property
    def transactions(self) -> TransactionMetrics: ...


class Replication:
    def __init__(
        self, config: StoreConfig, clock: Clock, commitlog: CommitLog, epoch_file: EpochFile, replica_log: ReplicaLog
    ) -> None:
        self.role = config.broker_role
        self.epoch_file = epoch_file
        self.replica_log = replica_log
        self._timeout_s = config.sync_replicas_timeout_ms / 1000
        self.ha_service: HAService | None = None
        self.client: HAClient | None = None
        self.connection: ReplicationConnection | None = None
        epoch_file.load()
        if self.role is BrokerRole.SLAVE:
            self.client = HAClient(config, commitlog, replica_log, epoch_file)
            self.connection = ReplicationConnection(
                self.client,
                config.ha_master_address,
                config.ha_reconnect_interval_max_ms,
                config.ha_housekeeping_interval_ms,
                clock,
            )
        else:
            empty = epoch_file.last_epoch < 0
            epoch_file.append(
                max(epoch_file.last_epoch + 1, 1), commitlog.min_offset if empty else commitlog.max_offset
            )
            self.ha_service = HAService(config, commitlog, epoch_file, clock)

    @classmethod
    def of_store(cls, store: StoreParts, clock: Clock) -> Replication:
        """The role of a FileStore being started (after recovery, before its services)."""
        assert store.reput is not None and store.checkpoint is not None
        replica_log = ReplicaLog(
            store.config,
            store.commitlog,
            store.cq_store,
            store.index_service,
            store.reput,
            store.checkpoint,
            store.transactions,
        )
        return cls(store.config, clock, store.commitlog, EpochFile(store.config.store_root), replica_log)

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    @property
    def services(self) -> list:
        """Background loops to start with the store's others."""
        return [self.connection] if self.connection is not None else []

    def after_append(self, end_offset: int, wait: bool) -> bool:
        """Called after each put's append (and flush wait): False when a SYNC_MASTER's slaves
        did not confirm ``end_offset`` in time."""
        ha = self.ha_service
        if ha is None:
            return True
        ha.notify_append()
        if wait and self.role is BrokerRole.SYNC_MASTER:
            return ha.wait_for_replicas(end_offset, self._timeout_s)
        return True
