"""A store's replication role: static from StoreConfig, or, in controller mode (``etcd_endpoints``
set, RocketMQ's enableControllerMode), assigned by the group's elections through
``ha/controller_mode.py``, which calls ``become_master`` / ``become_slave`` / ``become_candidate``
as the etcd view changes.

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
  ack, user...) is refused by ``ReplicaRole.check_writable`` (``NotMasterWriteError``, ha/role.py),
  which those tables and the pop engine get when the store builds them, so no replica diverges
  from its master. Every role change drops the pop engine's in-flight state (``on_role_change``:
  ``PopService.forget``): a new master pops from the committed offsets it received.

Built by the store after recovery with the parts it works on; ``open()``, once the store has
caught up, loads the epoch file and takes the static role, or builds the controller-mode loop
(which needs this object: it drives the role changes and is the master's ``WriteGate``).
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
from services.store.errors import ReplicationError
from services.store.ha.config_sync import ConfigTables
from services.store.ha.epoch_file import EpochFile
from services.store.ha.ha_client import HAClient
from services.store.ha.ha_service import HAService, SessionListener
from services.store.ha.replica_log import ReplicaLog
from services.store.ha.role import Refusal, ReplicaRole, WriteGate
from services.store.log.commitlog import CommitLog
from services.store.rpc.replicate_client import ReplicationConnection

log = logging.getLogger(__name__)


class Coordinator(Protocol):
    """The controller-mode loops, started and stopped with the store."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def halt(self) -> None: ...


def _nothing() -> None:
    pass


class Replication:
    name = "replication"

    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        commitlog: CommitLog,
        state: ReplicaRole,
        epoch_file: EpochFile,
        replica_log: ReplicaLog,
        config_tables: ConfigTables | None = None,
        on_role_change: Callable[[], None] = _nothing,
        on_become_master: Callable[[], None] = _nothing,
        on_commit: Callable[[], None] | None = None,
        disk_full: Callable[[], bool] = lambda: False,
    ) -> None:
        self.config = config
        self.clock = clock
        self.commitlog = commitlog
        self.epoch_file = epoch_file
        self.replica_log = replica_log
        self._state = state  # role, master address, gate, HAService: changed here only, under _lock
        self._timeout_s = config.sync_replicas_timeout_ms / 1000
        self._lock = threading.Lock()  # role changes
        self.master_epoch = 0
        self.config_tables = config_tables or ConfigTables([], config.ha_config_sync_interval_ms, clock)
        self._on_role_change = on_role_change  # the store's: PopService.forget
        self._on_become_master = on_become_master  # the store's: PopService.restore (from the pop journal)
        self._on_commit = on_commit  # a master's HAService calls it when commit_offset may have moved: reput's wake-up
        self._disk_full = disk_full  # the store's: published to the group (controller mode) for elections
        self.client = HAClient(config, commitlog, replica_log, epoch_file, self.config_tables)
        self.connection: ReplicationConnection | None = None
        self.coordinator: Coordinator | None = None
        self._counts_lock = threading.Lock()  # the two counters below (metrics read them)
        self.ha_not_available_total = 0  # puts refused: too few replicas in sync (HA_NOT_AVAILABLE)
        self.slave_timeout_total = 0  # puts the slaves did not confirm in time (SLAVE_PERSISTENCE_TIMEOUT)

    def open(self) -> None:
        """Take the first role (after recovery, before the store's services start): load the
        epoch file, then follow the static role, or build the controller-mode loop."""
        config, state, epoch_file = self.config, self._state, self.epoch_file
        epoch_file.load()
        state.taken = True
        if config.etcd_endpoints:
            from services.store.ha.controller_mode import ControllerMode  # imports the etcd client

            mode = ControllerMode(config, self.clock, self, self._disk_full)
            self.coordinator = mode
            state.gate = mode
            return
        if config.broker_role is BrokerRole.SLAVE:
            state.role = BrokerRole.SLAVE
            state.master_address = config.ha_master_address
            self.connection = self._connection(config.ha_master_address)
        else:
            empty = epoch_file.last_epoch < 0
            commitlog = self.commitlog
            epoch_file.append(
                max(epoch_file.last_epoch + 1, 1), commitlog.min_offset if empty else commitlog.max_offset
            )
            state.ha_service = HAService(config, commitlog, epoch_file, self.clock, config_tables=self.config_tables)
            state.role = config.broker_role

    # -- the role, as ha/role.py holds it ---------------------------------------------------------
    @property
    def role(self) -> BrokerRole | None:
        return self._state.role

    @property
    def master_address(self) -> str:
        """The master a slave follows."""
        return self._state.master_address

    @property
    def gate(self) -> WriteGate | None:
        return self._state.gate

    @property
    def ha_service(self) -> HAService | None:
        """A master's HAService (None on a slave or a candidate)."""
        return self._state.ha_service

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
        return self._state.is_slave

    @property
    def is_master(self) -> bool:
        return self._state.is_master

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
            self._state.role = None
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
            self._state.role = None  # refuse puts while switching
            self._close_master()
            connection, self.connection = self.connection, None
            if connection is not None:
                connection.stop()
            self._state.master_address = ""
            with self.commitlog.put_lock:
                last = self.epoch_file.last_epoch
                if epoch < last:
                    raise ReplicationError(f"elected at masterEpoch {epoch}, but this replica's log is at {last}")
                if epoch > last:
                    self.epoch_file.append(epoch, self.commitlog.max_offset)
            self.replica_log.refresh_queue_offset_table()
            self._on_role_change()  # before writes open: pops start from the replicated committed offsets
            self._on_become_master()  # and the pop state the journal holds (everything is dispatched)
            self._state.ha_service = HAService(
                self.config,
                self.commitlog,
                self.epoch_file,
                self.clock,
                listener,
                required_slaves,
                sync_state_slaves,
                self._on_commit,
                self.config_tables,
            )
            self.master_epoch = epoch
            self._state.role = self.config.broker_role
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
                self._on_role_change()
            self._state.role = BrokerRole.SLAVE
            self._close_master()
            if self.connection is not None and self.master_address == master_address:
                return
            old, self.connection = self.connection, None
            if old is not None:
                old.stop()
            self._state.master_address = master_address
            self.connection = self._connection(master_address)
            self.connection.start()
            log.info("replica %d follows master %s", self.config.replica_id, master_address)

    def become_candidate(self) -> None:
        """No live master this replica may serve as: refuse puts, stop serving slaves (a
        connection to the old master stays and reconnects, in case it comes back)."""
        with self._lock:
            if self.is_master:
                self._on_role_change()
            if self.role is not BrokerRole.SLAVE:
                self._state.role = None
            self._close_master()

    def _close_master(self) -> None:
        state = self._state
        ha, state.ha_service = state.ha_service, None
        if ha is not None:
            ha.close()

    # -- puts -------------------------------------------------------------------------------------
    def refuse_put(self) -> Refusal | None:
        """Why a put must be refused before anything is written (None: go ahead)."""
        state = self._state
        if state.role is BrokerRole.SLAVE:
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: this store is a slave, writes go to its master"
        if state.role is None:
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: its group is electing one"
        gate = state.gate
        refused = gate.refuse_put() if gate is not None else None
        if refused is not None and refused[0] is PutStatus.HA_NOT_AVAILABLE:
            with self._counts_lock:
                self.ha_not_available_total += 1
        return refused

    def after_append(self, end_offset: int, wait: bool) -> tuple[PutStatus, str] | None:
        """Called after each put's append (and flush wait): None when the put is confirmed.
        FLUSH_SLAVE_TIMEOUT when a SYNC_MASTER's slaves did not confirm ``end_offset`` in time,
        or fewer than min_in_sync_replicas replicas (itself included) confirmed it: a slave of
        the SyncStateSet lost while the put waited shrinks the set, which ends the all-ack wait,
        but one copy is not what min_in_sync_replicas promised. NOT_MASTER (controller mode)
        when this replica stopped being the writable master meanwhile (its lease ran out, its
        role changed): the record is written here but was never a master's confirmed write (a new
        master may not hold it), so the client must send it again, where FLUSH_SLAVE_TIMEOUT
        reads to a remoting producer as stored on the master."""
        state = self._state
        ha = state.ha_service
        ok = True
        if ha is not None:
            ha.notify_append()
            if wait and state.role is BrokerRole.SYNC_MASTER:
                ok = ha.wait_for_replicas(end_offset, self._timeout_s)
                needed = self.config.min_in_sync_replicas
                if ok and state.gate is not None and needed > 1:
                    ok = 1 + sum(1 for p in ha.slaves() if p.confirmed_offset >= end_offset) >= needed
                if not ok:
                    with self._counts_lock:
                        self.slave_timeout_total += 1
        gate = state.gate
        if gate is not None and (state.ha_service is None or not gate.writable()):
            return (
                PutStatus.SERVICE_NOT_AVAILABLE,
                f"{NOT_MASTER}: its lease or role ended while the put waited (written here, not confirmed)",
            )
        return None if ok else (PutStatus.FLUSH_SLAVE_TIMEOUT, "")
