"""Controller mode (RocketMQ's enableControllerMode) for one store replica: its role follows the
group's elections in etcd.

``ControllerMode`` owns the replica's part of the coordination: an ``EtcdClient``, the
``ReplicaController`` (membership under its lease, kept alive by a ``LeaseKeeper``, and the
watched ``RoleView``), the ``ElectionLoop`` every replica runs, and, while master, the
``SyncStateSetTracker``/``SyncStateSetLoop`` fed from the HA sessions. Its own loop
(``run_once``, woken by every change of the view and every 100 ms) does four things:

1. The role: master when the view shows this incarnation elected (``Replication.become_master``
   with the masterEpoch the controller supplied: appended to the epoch file at the max
   phy_offset, queue offsets retaken, then writes open); slave of the live master's address
   otherwise (the connection switches when the master does); no role while there is no live
   master.
2. Publishing this replica's confirmed offset and last epoch (what elections rank by), when they
   changed, at most every ``REPORT_INTERVAL_S``.
3. As master, the SyncStateSet: slaves that acked everything the master had when it last sent
   are offered (grow); a slave gone or not caught up for ha_max_time_slave_not_catchup_ms is
   dropped (shrink). Both through the controller's compare-and-swap.
4. Nothing else: acks and disconnections arrive on the HA streams' threads and are only
   recorded (``acked``, ``disconnected``) for this loop, so a stream never waits on etcd.

As the ``WriteGate`` of the master's puts: refused before anything is written when this replica
is not certainly the writable master (lease and view, ``is_master_writable``) or its SyncStateSet
is smaller than min_in_sync_replicas (HA_NOT_AVAILABLE); checked again before the
acknowledgement. With all_ack_in_sync_state_set a SYNC put waits for every slave of the set in
force or being asked for (``SyncStateSetTracker.effective``). Reads see only what every slave of
that set confirmed (the master's reput stops at ``HAService.commit_offset``). A planned switch
(``switch.py``) pauses the gate: new puts refused, then none acknowledged, until the target
holds everything.

Elections won are counted with their duration (``ElectionStats``): from the moment this
replica's view first showed the group without its live master (the old master's lease gone or
revoked, or the master key naming another replica, as in a planned switch) to the moment this
replica's writes opened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from services.coordination.group_keys import SyncStateSet
from services.coordination.group_state import GroupState
from services.domain.statuses import NOT_MASTER, PutStatus
from services.runtime.clock import Clock
from services.runtime.etcd import EtcdError
from services.runtime.etcd.rpc.client import EtcdClient
from services.store.config import StoreConfig
from services.store.errors import ReplicationError
from services.store.ha.controller import ElectionLoop, ReplicaController
from services.store.ha.epoch_file import EpochFile
from services.store.ha.ha_client import HAClient
from services.store.ha.ha_service import HAService, SessionListener
from services.store.ha.role import Refusal
from services.store.ha.switch import MasterSwitch, SwitchResult
from services.store.ha.sync_state import SyncStateSetLoop, SyncStateSetTracker
from services.store.log.commitlog import CommitLog

log = logging.getLogger(__name__)


class Role(Protocol):
    """The replica's role it switches (``ha.replication.Replication``)."""

    commitlog: CommitLog
    epoch_file: EpochFile
    client: HAClient
    master_epoch: int

    @property
    def master_address(self) -> str: ...
    @property
    def ha_service(self) -> HAService | None: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def is_slave(self) -> bool: ...
    def become_master(
        self,
        epoch: int,
        listener: SessionListener | None = None,
        required_slaves: Callable[[], frozenset[int]] | None = None,
        sync_state_slaves: Callable[[], frozenset[int]] | None = None,
    ) -> None: ...
    def become_slave(self, master_address: str) -> None: ...
    def become_candidate(self) -> None: ...


LOOP_INTERVAL_S = 0.1


@dataclass(frozen=True)
class ElectionStats:
    """Elections this replica won, and how long each took (see the module docstring)."""

    won_total: int = 0
    timed_total: int = 0  # those whose start this replica saw (a first master's counts from its start)
    seconds_sum: float = 0.0
    last_seconds: float = 0.0


REPORT_INTERVAL_S = 0.2
ETCD_ATTEMPT_TIMEOUT_S = 0.5


class ControllerMode:
    """One replica's controller-mode loops (a store service: start, stop, halt)."""

    name = "ha-controller"

    def __init__(
        self, config: StoreConfig, clock: Clock, replication: Role, disk_full: Callable[[], bool] = lambda: False
    ) -> None:
        self.config = config
        self.disk_full = disk_full  # the store's CleanService.refresh_disk_full: published for elections
        self.clock = clock
        self.replication = replication
        self.replica_id = config.replica_id
        endpoints = [e.strip() for e in config.etcd_endpoints.split(",") if e.strip()]
        self.etcd = EtcdClient(
            endpoints, timeout_s=config.lease_ttl_ms / 1000, attempt_timeout_s=ETCD_ATTEMPT_TIMEOUT_S
        )
        self.controller = ReplicaController(
            config.broker_name,
            config.replica_id,
            config.registered_address,
            self.etcd,
            clock,
            config.lease_ttl_ms,
            unclean_election_enable=config.unclean_election_enable,
            all_ack_in_sync_state_set=config.all_ack_in_sync_state_set,
        )
        self.election = ElectionLoop(self.controller)
        self.tracker = SyncStateSetTracker(config.replica_id, clock, config.ha_max_time_slave_not_catchup_ms)
        self.sync_loop = SyncStateSetLoop(self.controller, self.tracker)
        self._lock = threading.Lock()  # the streams' records below
        self._acks: dict[int, tuple[int, int]] = {}  # slave -> (max offset, ms) of its last caught-up ack
        self._gone: set[int] = set()
        self._reported: tuple[int, int, bool] | None = None
        self._checked_at_s = float("-inf")  # when _report last looked (at most every REPORT_INTERVAL_S)
        self._registered = False
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.switch = MasterSwitch(self, clock)
        self.elections = ElectionStats()
        self._master_lost_at_s: float | None = clock.monotonic_s()  # no master seen yet
        self.controller.view.add_listener(self._on_view)

    def _on_view(self, old: GroupState, new: GroupState) -> None:
        """On the watch's thread: note when the group lost its master, and wake the loop."""
        lost = old.master_alive() and (
            not new.master_alive()
            or (
                new.master is not None
                and old.master is not None
                and new.master.masterBrokerId != old.master.masterBrokerId
            )
        )
        if lost and self._master_lost_at_s is None:
            self._master_lost_at_s = self.clock.monotonic_s()
        self._wake.set()

    def _elected(self) -> None:
        lost_at, self._master_lost_at_s = self._master_lost_at_s, None
        e = self.elections
        if lost_at is None:
            self.elections = ElectionStats(e.won_total + 1, e.timed_total, e.seconds_sum, e.last_seconds)
            return
        took = max(0.0, self.clock.monotonic_s() - lost_at)
        self.elections = ElectionStats(e.won_total + 1, e.timed_total + 1, e.seconds_sum + took, took)

    # -- the HA sessions (SessionListener), on the streams' threads --------------------------------
    def acked(self, replica_id: int, max_phy_offset: int, caught_up: bool) -> None:
        if caught_up:
            with self._lock:
                self._acks[replica_id] = (max_phy_offset, self.clock.now_ms())
                self._gone.discard(replica_id)
            self._wake.set()

    def disconnected(self, replica_id: int) -> None:
        with self._lock:
            self._acks.pop(replica_id, None)
            self._gone.add(replica_id)
        self._wake.set()

    def required_slaves(self) -> frozenset[int]:
        """The slaves of the SyncStateSet (in force or asked for): what a SYNC put waits for
        with all_ack_in_sync_state_set, and what reads wait for (``HAService.commit_offset``)."""
        return self.tracker.effective() - {self.replica_id}

    # -- the planned switch (switch.MasterSide) ----------------------------------------------------
    def in_sync_set(self) -> frozenset[int]:
        return self.tracker.local

    def max_offset(self) -> int:
        return self.replication.commitlog.max_offset

    def confirmed_by(self, replica_id: int) -> int | None:
        ha = self.replication.ha_service
        for slave in ha.slaves() if ha is not None else []:
            if slave.replica_id == replica_id:
                return slave.confirmed_offset
        return None

    @property
    def view_state(self) -> GroupState:
        return self.controller.view.state

    def election_figures(self) -> tuple[int, int, float, float, int]:
        """(won, timed, seconds sum, last seconds, planned switches handed over) for the metrics."""
        e = self.elections
        return e.won_total, e.timed_total, e.seconds_sum, e.last_seconds, self.switch.switches_total

    def switch_master(self, target: int, timeout_s: float) -> SwitchResult:
        """A planned switch to replica ``target`` (switch.py); this replica must be the master."""
        result = self.switch.switch(target, timeout_s)
        self._wake.set()  # follow the new master at once
        return result

    # -- the WriteGate ------------------------------------------------------------------------------
    def writable(self) -> bool:
        return not self.switch.handing_over and self.controller.is_master_writable()

    def refuse_put(self) -> Refusal | None:
        if self.switch.paused:
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: a planned switch is handing over"
        if not self.writable():
            return PutStatus.SERVICE_NOT_AVAILABLE, f"{NOT_MASTER}: its lease or role is changing"
        in_sync = len(self.tracker.local)
        if in_sync < self.config.min_in_sync_replicas:
            return (
                PutStatus.HA_NOT_AVAILABLE,
                f"{in_sync} replica(s) in sync, min_in_sync_replicas is {self.config.min_in_sync_replicas}",
            )
        return None

    # -- the loop -------------------------------------------------------------------------------------
    def run_once(self) -> None:
        if not self._registered:
            self.controller.start()  # registers and watches; raises EtcdError while etcd is unreachable
            self._registered = True
            self.election.start()
        self.switch.settle()
        self._follow_role()
        self._report()
        if self.replication.is_master:
            self._sync_state_set()

    def _follow_role(self) -> None:
        controller, replication = self.controller, self.replication
        state = controller.view.state
        epoch = controller.master_epoch()
        if epoch is not None and not controller.lease_lost():
            if not replication.is_master or replication.master_epoch != epoch:
                self.switch.reset()
                try:
                    replication.become_master(
                        epoch, self, self.required_slaves if self._all_ack else None, self.required_slaves
                    )
                except ReplicationError as exc:
                    log.error("replica %d cannot serve as master: %s", self.replica_id, exc)
                    return
                self._elected()
                self.tracker.reset(
                    state.sync_state or SyncStateSet(frozenset([self.replica_id]), 0),
                    self.replication.epoch_file.entries(self.replication.commitlog.max_offset)[-1].start_offset,
                )
                with self._lock:
                    self._acks.clear()
                    self._gone.clear()
            return
        if state.master_alive() and state.master is not None and state.master.masterBrokerId != self.replica_id:
            self._master_lost_at_s = None  # another replica won
            if not replication.is_slave or replication.master_address != state.master.masterAddress:
                self.switch.reset()
                replication.become_slave(state.master.masterAddress)
            return
        if replication.is_master:
            self.switch.reset()
        replication.become_candidate()

    @property
    def _all_ack(self) -> bool:
        return self.config.all_ack_in_sync_state_set

    def _report(self) -> None:
        now = self.clock.monotonic_s()
        if now - self._checked_at_s < REPORT_INTERVAL_S:
            return  # the loop wakes on every HA ack: the disk is looked at once per interval at most
        self._checked_at_s = now
        progress = self.replication.client.progress()
        current = (progress.confirmed_offset, max(self.replication.epoch_file.last_epoch, 0), self.disk_full())
        if current != self._reported:
            self.controller.report(*current)
            self._reported = current

    def _sync_state_set(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, {}
            gone, self._gone = self._gone, set()
        for replica_id in gone:
            self.tracker.disconnected(replica_id)
        for replica_id, (_, at_ms) in acks.items():
            self.tracker.caught_up(replica_id, at_ms)
        before = self.tracker.effective()
        for replica_id, (max_offset, _) in sorted(acks.items()):
            self.sync_loop.offer(replica_id, max_offset, max_offset)
        self.sync_loop.run_once()
        ha = self.replication.ha_service
        if ha is not None and self.tracker.effective() != before:
            ha.wake()  # all-ack waiters re-read the set

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except EtcdError as exc:
                log.info("replica %d: controller round failed: %s", self.replica_id, exc)
            except Exception:
                log.exception("replica %d: controller round failed", self.replica_id)
            self._wake.wait(LOOP_INTERVAL_S)
            self._wake.clear()

    def stop(self) -> None:
        """Ends the lease too (a clean stop: the group elects a new master at once)."""
        self._end(revoke=True)

    def halt(self) -> None:
        """As a killed process: the lease is left to expire."""
        self._end(revoke=False)

    def _end(self, revoke: bool) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        self.election.stop()
        try:
            self.controller.stop(revoke=revoke)
        except EtcdError as exc:
            log.info("replica %d: ending the lease failed: %s", self.replica_id, exc)
        self.etcd.close()
