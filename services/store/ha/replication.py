"""A store's replication role, wired into FileStore at start: static from StoreConfig, or, in
controller mode (``etcd_endpoints`` set, RocketMQ's enableControllerMode), assigned by the
group's elections through ``ha/controller_mode.py``, which calls ``become_master`` /
``become_slave`` / ``become_candidate`` as the etcd view changes.

* A master (ASYNC_MASTER, SYNC_MASTER) records an epoch before it writes: with static roles the
  last epoch + 1 when it starts (from its min offset when the file is empty: everything before
  was written by this store alone); in controller mode the masterEpoch it was elected at, from
  its max phy_offset. It owns an ``HAService`` that the ``Replicate`` stream serves slaves
  from; ``after_append`` wakes those streams and, for a SYNC_MASTER, waits for the slaves'
  confirmations (FLUSH_SLAVE_TIMEOUT after sync_replicas_timeout_ms).
* A slave refuses puts and runs a ``ReplicationConnection`` to its master (ha_master_address,
  or the elected master's address; a new master means a new connection).
* In controller mode a replica with no role yet (electing) refuses puts, and a master's puts
  pass its ``WriteGate`` first (lease-bound writability, min_in_sync_replicas) and again
  before the acknowledgement.
* The ``config/`` tables follow the CommitLog on the same stream (``ha/config_sync.py``); every
  state-changing call of a replica that is not the writable master (topic, group, offset, pop,
  ack, user...) is refused by ``check_writable`` (``NotMasterWriteError``), which the store
  installs into those tables and the pop engine, so no replica diverges from its master. Every
  role change drops the pop engine's in-flight state (``PopService.forget``): a new master
  pops from the committed offsets it received.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from services.domain.statuses import NOT_MASTER, PutStatus
from services.runtime.clock import Clock
from services.runtime.rpc.tls import TlsFiles
from services.store.config import BrokerRole, StoreConfig
from services.store.errors import NotMasterWriteError, ReplicationError
from services.store.ha.config_sync import ConfigTables
from services.store.ha.epoch_file import EpochFile
from services.store.ha.ha_client import HAClient
from services.store.ha.ha_service import HAService, SessionListener
from services.store.ha.replica_log import ReplicaLog
from services.store.index.service import IndexService
from services.store.log.checkpoint import CheckpointFile
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.log.reput import ReputService
from services.store.metadata.auth_config import AuthConfigManager
from services.store.metadata.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.metadata.transaction_metrics import TransactionMetrics
from services.store.pop.service import PopService
from services.store.rpc.replicate_client import ReplicationConnection

log = logging.getLogger(__name__)

Refusal = tuple[PutStatus, str]


class WriteGate(Protocol):
    """A controller-mode master's checks (ha/controller_mode.py)."""

    def refuse_put(self) -> Refusal | None: ...
    def writable(self) -> bool: ...


class Coordinator(Protocol):
    """The controller-mode loops, started and stopped with the store."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def halt(self) -> None: ...


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
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...
    @property
    def delay_offsets(self) -> DelayOffsetManager: ...
    @property
    def auth(self) -> AuthConfigManager: ...
    @property
    def pop(self) -> PopService: ...


class Replication:
    name = "replication"

    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        commitlog: CommitLog,
        epoch_file: EpochFile,
        replica_log: ReplicaLog,
        config_tables: ConfigTables | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.commitlog = commitlog
        self.epoch_file = epoch_file
        self.replica_log = replica_log
        self._timeout_s = config.sync_replicas_timeout_ms / 1000
        self._lock = threading.Lock()  # role changes
        self.role: BrokerRole | None = None  # None: controller mode, no role yet
        self.master_epoch = 0
        self.master_address = ""  # the master a slave follows
        self.ha_service: HAService | None = None
        self.config_tables = config_tables or ConfigTables([], config.ha_config_sync_interval_ms, clock)
        self.on_role_change: Callable[[], None] = lambda: None  # the store's: PopService.forget
        self.client = HAClient(config, commitlog, replica_log, epoch_file, self.config_tables)
        self.connection: ReplicationConnection | None = None
        self.gate: WriteGate | None = None
        self.coordinator: Coordinator | None = None
        self.reput: ReputService | None = None  # of_store: woken when commit_offset moves
        self._counts_lock = threading.Lock()  # the two counters below (metrics read them)
        self.ha_not_available_total = 0  # puts refused: too few replicas in sync (HA_NOT_AVAILABLE)
        self.slave_timeout_total = 0  # puts the slaves did not confirm in time (SLAVE_PERSISTENCE_TIMEOUT)
        epoch_file.load()
        if config.etcd_endpoints:
            return
        if config.broker_role is BrokerRole.SLAVE:
            self.role = BrokerRole.SLAVE
            self.master_address = config.ha_master_address
            self.connection = self._connection(config.ha_master_address)
        else:
            empty = epoch_file.last_epoch < 0
            epoch_file.append(
                max(epoch_file.last_epoch + 1, 1), commitlog.min_offset if empty else commitlog.max_offset
            )
            self.ha_service = HAService(config, commitlog, epoch_file, clock, config_tables=self.config_tables)
            self.role = config.broker_role

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
            store.lite,
        )
        tables = [store.topics, store.groups, store.consumer_offsets, store.delay_offsets, store.auth]
        config_tables = ConfigTables(tables, store.config.ha_config_sync_interval_ms, clock)
        replication = cls(
            store.config, clock, store.commitlog, EpochFile(store.config.store_root), replica_log, config_tables
        )
        for part in (store.topics, store.groups, store.delay_offsets, store.auth, store.pop):
            part.check_writable = replication.check_writable
        replication.on_role_change = store.pop.forget
        replication.reput = store.reput
        store.reput.limit = replication.dispatch_limit
        if store.config.etcd_endpoints:
            from services.store.ha.controller_mode import ControllerMode  # imports the etcd client

            replication.coordinator = ControllerMode(store.config, clock, replication)
        return replication

    def _connection(self, address: str) -> ReplicationConnection:
        config = self.config
        tls = (
            TlsFiles(config.ha_tls_ca_path, config.tls_cert_path, config.tls_key_path)
            if config.ha_tls_ca_path
            else None
        )
        return ReplicationConnection(
            self.client,
            address,
            config.ha_reconnect_interval_max_ms,
            config.ha_housekeeping_interval_ms,
            self.clock,
            tls,
        )

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    @property
    def is_master(self) -> bool:
        return self.role is not None and self.role is not BrokerRole.SLAVE

    @property
    def services(self) -> list:
        """Background loops to start with the store's others (stopped first)."""
        return [self]

    # -- lifecycle (a store service) ------------------------------------------------------------
    def start(self) -> None:
        if self.connection is not None:
            self.connection.start()
        if self.coordinator is not None:
            self.coordinator.start()

    def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
        self._end_roles(halt=False)

    def halt(self) -> None:
        if self.coordinator is not None:
            self.coordinator.halt()
        self._end_roles(halt=True)

    def _end_roles(self, halt: bool) -> None:
        with self._lock:
            self.role = None
            self._close_master()
            connection, self.connection = self.connection, None
        if connection is not None:
            connection.halt() if halt else connection.stop()

    # -- role changes (controller mode) ---------------------------------------------------------
    def become_master(
        self,
        epoch: int,
        listener: SessionListener | None = None,
        required_slaves: Callable[[], frozenset[int]] | None = None,
        sync_state_slaves: Callable[[], frozenset[int]] | None = None,
    ) -> None:
        """Elected at masterEpoch ``epoch``: stop following, record the epoch from the max
        phy_offset, retake the queue offsets, serve slaves; writes open only after all that."""
        with self._lock:
            self.role = None  # refuse puts while switching
            self._close_master()
            connection, self.connection = self.connection, None
            if connection is not None:
                connection.stop()
            self.master_address = ""
            with self.commitlog.put_lock:
                last = self.epoch_file.last_epoch
                if epoch < last:
                    raise ReplicationError(f"elected at masterEpoch {epoch}, but this replica's log is at {last}")
                if epoch > last:
                    self.epoch_file.append(epoch, self.commitlog.max_offset)
            self.replica_log.refresh_queue_offset_table()
            self.on_role_change()  # before writes open: pops start from the replicated committed offsets
            self.ha_service = HAService(
                self.config,
                self.commitlog,
                self.epoch_file,
                self.clock,
                listener,
                required_slaves,
                sync_state_slaves,
                self.reput.notify_append if self.reput is not None else None,
                self.config_tables,
            )
            self.master_epoch = epoch
            self.role = self.config.broker_role
            log.info(
                "replica %d is master at epoch %d from phy_offset %d",
                self.config.replica_id,
                epoch,
                self.commitlog.max_offset,
            )

    def become_slave(self, master_address: str) -> None:
        """Follow the master at ``master_address`` (a new connection when it changed)."""
        with self._lock:
            if self.role is not BrokerRole.SLAVE:
                self.on_role_change()
            self.role = BrokerRole.SLAVE
            self._close_master()
            if self.connection is not None and self.master_address == master_address:
                return
            old, self.connection = self.connection, None
            if old is not None:
                old.stop()
            self.master_address = master_address
            self.connection = self._connection(master_address)
            self.connection.start()
            log.info("replica %d follows master %s", self.config.replica_id, master_address)

    def become_candidate(self) -> None:
        """No live master this replica may serve as: refuse puts, stop serving slaves (a
        connection to the old master stays and reconnects, in case it comes back)."""
        with self._lock:
            if self.is_master:
                self.on_role_change()
            if self.role is not BrokerRole.SLAVE:
                self.role = None
            self._close_master()

    def _close_master(self) -> None:
        ha, self.ha_service = self.ha_service, None
        if ha is not None:
            ha.close()

    def dispatch_limit(self) -> int | None:
        """How far reput may dispatch (``ReputService.limit``): a master's commit_offset (in
        controller mode: what its SyncStateSet confirmed); None (everything) otherwise."""
        ha = self.ha_service
        return ha.commit_offset() if ha is not None else None

    # -- state changes ----------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raises NotMasterWriteError unless this replica is the writable master: every
        state-changing call but puts (which answer SERVICE_NOT_AVAILABLE: ``refuse_put``)."""
        if self.role is BrokerRole.SLAVE:
            raise NotMasterWriteError(f"{NOT_MASTER}: this store is a slave of {self.master_address}")
        if self.role is None:
            raise NotMasterWriteError(f"{NOT_MASTER}: its group is electing one")
        gate = self.gate
        if gate is not None and not gate.writable():
            raise NotMasterWriteError(f"{NOT_MASTER}: its lease or role is changing")

    # -- puts -------------------------------------------------------------------------------------
    def refuse_put(self) -> Refusal | None:
        """Why a put must be refused before anything is written (None: go ahead)."""
        if self.role is BrokerRole.SLAVE:
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: this store is a slave, writes go to its master"
        if self.role is None:
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: its group is electing one"
        gate = self.gate
        refused = gate.refuse_put() if gate is not None else None
        if refused is not None and refused[0] is PutStatus.HA_NOT_AVAILABLE:
            with self._counts_lock:
                self.ha_not_available_total += 1
        return refused

    def after_append(self, end_offset: int, wait: bool) -> bool:
        """Called after each put's append (and flush wait): False when a SYNC_MASTER's slaves
        did not confirm ``end_offset`` in time, or (controller mode) this replica is no longer
        the writable master, or fewer than min_in_sync_replicas replicas (itself included)
        confirmed it: a slave of the SyncStateSet lost while the put waited shrinks the set,
        which ends the all-ack wait, but one copy is not what min_in_sync_replicas promised."""
        ha = self.ha_service
        if ha is None:
            return self.gate is None
        ha.notify_append()
        ok = True
        gate = self.gate
        if wait and self.role is BrokerRole.SYNC_MASTER:
            ok = ha.wait_for_replicas(end_offset, self._timeout_s)
            needed = self.config.min_in_sync_replicas
            if ok and gate is not None and needed > 1:
                ok = 1 + sum(1 for p in ha.slaves() if p.confirmed_offset >= end_offset) >= needed
            if not ok:
                with self._counts_lock:
                    self.slave_timeout_total += 1
        gate = self.gate
        return ok and (gate is None or gate.writable())
