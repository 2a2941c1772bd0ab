"""One store replica's part in its group's coordination, RocketMQ 5's controller mode with etcd
holding the consensus: every replica runs a ReplicaController, and there is no controller
process. A replica registers (its membership key under its own lease), publishes its confirmed
offset, takes part in elections (``elect_master``: one compare-and-swap transaction that any
replica may run, and only one can win per masterEpoch) and, as master, changes the SyncStateSet
(``alter_sync_state_set``); its ``ElectionLoop`` tries an election whenever the group has no
live master. The decisions are model.py's; this module reads the group, runs the
transaction and handles its outcome.

A transaction retried by the client after UNAVAILABLE may have been applied by its first
attempt and then report ``succeeded=False`` (its compares no longer hold, because of itself).
So a failed transaction is judged by what it read back: if the master and SyncStateSet are
exactly the ones it meant to write, and at an epoch only it could have produced from what it
read, it took effect.

Writability (``is_master_writable``) is what a master checks before it acknowledges a write:
it is the master in the group's watched view, elected while registered under the lease it holds
now (a master key written before its latest registration names a dead incarnation), and that
lease is certainly held for ``safety_margin_ms`` more. etcd expires a lease
``ttl`` after the leader last renewed it, which is no earlier than ``ttl`` after our keepalive
was sent; so stopping ``safety_margin_ms`` before that point stops writes before the lease can
expire and another replica be elected, with the margin covering the clock-rate difference
between this host and etcd's leader and the time between the check and the acknowledgement.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass

from services.coordination.group_keys import GroupKeys, MasterInfo, ReplicaInfo, SyncStateSet
from services.coordination.group_state import (
    ControllerCode,
    GroupState,
    Plan,
    plan_alter_sync_state_set,
    plan_elect_master,
)
from services.coordination.role_view import RoleView
from services.runtime.clock import Clock
from services.runtime.etcd import EtcdError, Get
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.etcd.rpc.streams import LeaseKeeper

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL_MS = 2000
DEFAULT_SAFETY_MARGIN_MS = 500


@dataclass(frozen=True)
class ControllerResult:
    """The answer to an elect or alter: RocketMQ's code and remark, and the master and
    SyncStateSet as they stand after it (what this call wrote, or what it found)."""

    code: ControllerCode
    remark: str = ""
    master: MasterInfo | None = None
    sync_state: SyncStateSet | None = None

    @property
    def ok(self) -> bool:
        return self.code == ControllerCode.SUCCESS


class ReplicaController:
    """Replica ``replica_id`` (RocketMQ's brokerId) of group ``group`` (brokerName), reachable at
    ``address``. ``register()`` grants its lease and writes its membership; ``start()`` keeps the
    lease alive and the role view watched on threads (or call ``keeper.run_once()`` and drive
    the view yourself with a manual clock)."""

    def __init__(
        self,
        group: str,
        replica_id: int,
        address: str,
        etcd: EtcdClient,
        clock: Clock,
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
        unclean_election_enable: bool = False,
        all_ack_in_sync_state_set: bool = False,
        election_priority: int = 0,
        prefix: str | None = None,
        view: RoleView | None = None,
    ) -> None:
        self.keys = GroupKeys(group) if prefix is None else GroupKeys(group, prefix)
        self.replica_id = replica_id
        self.address = address
        self.etcd = etcd
        self.clock = clock
        self.lease_ttl_s = max(1, math.ceil(lease_ttl_ms / 1000))
        self.safety_margin_s = safety_margin_ms / 1000.0
        self.unclean_election_enable = unclean_election_enable
        self.all_ack_in_sync_state_set = all_ack_in_sync_state_set  # elections may pass over a full disk
        self.election_priority = election_priority
        self.view = view or RoleView(etcd, self.keys)
        self.keeper: LeaseKeeper | None = None
        self._lock = threading.Lock()
        self._epoch = 0
        self._max_offset = 0
        self._disk_full = False
        self._started = False

    # -- membership ---------------------------------------------------------------------------

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(
            self.replica_id, self.address, self._epoch, self._max_offset, self.election_priority, self._disk_full
        )

    def register(self) -> int:
        """A new lease and this replica's membership under it; returns the lease ID. Called
        again after the lease was lost (a new incarnation of the replica)."""
        old = self.keeper
        if old is not None:
            try:
                old.stop(revoke=True)
            except EtcdError as exc:
                log.info("replica %s/%d: revoking the old lease failed: %s", self.keys.group, self.replica_id, exc)
        # A new incarnation: the membership key is created anew, so its create_revision (which
        # elections compare on) tells it from the last one. That one may be another process's: a
        # replica killed and restarted within its old lease finds its old key still there, and
        # must not carry on as the master it was without an election.
        self.etcd.delete(self.keys.replica(self.replica_id))
        sent = self.clock.monotonic_s()
        lease_id, ttl_s = self.etcd.lease_grant(self.lease_ttl_s)
        keeper = LeaseKeeper(self.etcd, lease_id, ttl_s, clock=self.clock, on_lost=self._lease_lost, granted_at_s=sent)
        self.etcd.put(self.keys.replica(self.replica_id), self.info().encode(), lease=lease_id)
        with self._lock:
            self.keeper = keeper
        if self._started:
            keeper.start()
        log.info(
            "replica %s/%d registered at %s, lease %x (%d s)",
            self.keys.group,
            self.replica_id,
            self.address,
            lease_id,
            ttl_s,
        )
        return lease_id

    def report(self, max_offset: int, epoch: int | None = None, disk_full: bool | None = None) -> None:
        """Publishes this replica's confirmed max offset (and the last epoch its log holds, and
        whether its disk is full), which elections rank candidates by."""
        self._max_offset = max_offset
        if epoch is not None:
            self._epoch = epoch
        if disk_full is not None:
            self._disk_full = disk_full
        keeper = self.keeper
        if keeper is None:
            raise RuntimeError("report before register")
        self.etcd.put(self.keys.replica(self.replica_id), self.info().encode(), lease=keeper.lease_id)

    def lease_lost(self) -> bool:
        keeper = self.keeper
        return keeper is None or keeper.schedule.lost

    def _lease_lost(self) -> None:
        log.warning("replica %s/%d lost its lease", self.keys.group, self.replica_id)

    def start(self) -> ReplicaController:
        """Starts the role view's watch and the lease keeper's thread (registering first if needed)."""
        self._started = True
        self.view.start()
        if self.keeper is None:
            self.register()
        else:
            self.keeper.start()
        return self

    def stop(self, revoke: bool = False) -> None:
        """Stops the keeper (``revoke``: and ends the lease, so the membership key goes now)
        and the view."""
        self._started = False
        if self.keeper is not None:
            self.keeper.stop(revoke=revoke)
        self.view.stop()

    # -- the master's writability ---------------------------------------------------------------

    def master_epoch(self) -> int | None:
        """The masterEpoch at which this replica, in its current incarnation (lease), is the
        live master in its view, or None. A master key written before this replica last
        registered names a dead incarnation: never this one's to act on."""
        state, keeper = self.view.state, self.keeper
        if keeper is None or not state.is_master(self.replica_id, keeper.lease_id):
            return None
        return state.master_epoch

    def lease_held_until_s(self) -> float:
        """Until when (clock seconds) this replica's lease is certainly held, margin deducted."""
        keeper = self.keeper
        if keeper is None or keeper.schedule.lost:
            return float("-inf")
        return keeper.schedule.expires_at_s - self.safety_margin_s

    def is_master_writable(self, now_s: float | None = None) -> bool:
        """Whether this replica may acknowledge writes as master at ``now_s`` (clock seconds)."""
        now = self.clock.monotonic_s() if now_s is None else now_s
        epoch = self.master_epoch()
        if epoch is None:
            return False
        return now < self.lease_held_until_s()

    # -- elections and the SyncStateSet --------------------------------------------------------

    def read_state(self) -> GroupState:
        """The group at one etcd revision (a single linearizable range read)."""
        result = self.etcd.txn([], [Get(self.keys.root, prefix=True)])
        return GroupState.from_kvs(self.keys, result.results[0].kvs, result.revision)

    def elect_master(self, prefer: int | None = None, unclean: bool | None = None) -> ControllerResult:
        """RocketMQ's electMaster for this group, asked by this replica; ``prefer`` elects that
        replica if it is a candidate (a planned switch). Done by one transaction that applies
        only if the master and SyncStateSet have not changed and the old master is still gone."""
        unclean = self.unclean_election_enable if unclean is None else unclean
        state = self.read_state()
        plan = plan_elect_master(state, self.replica_id, unclean, prefer, self.all_ack_in_sync_state_set)
        result = self._apply(plan, state)
        if result.ok:
            assert result.master is not None
            log.info(
                "group %s: replica %d elected master at masterEpoch %d (asked by %d)",
                self.keys.group,
                result.master.masterBrokerId,
                result.master.masterEpoch,
                self.replica_id,
            )
        return result

    def alter_sync_state_set(
        self,
        new_set: set[int] | frozenset[int],
        master_epoch: int | None = None,
        sync_state_set_epoch: int | None = None,
    ) -> ControllerResult:
        """RocketMQ's alterSyncStateSet, asked by this replica as master at ``master_epoch`` with
        the SyncStateSet at ``sync_state_set_epoch`` (both default to this replica's view)."""
        view = self.view.state
        if master_epoch is None:
            master_epoch = view.master_epoch
        if sync_state_set_epoch is None:
            sync_state_set_epoch = view.sync_state_set_epoch
        keeper = self.keeper
        if keeper is None:
            return ControllerResult(ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "not registered")
        state = self.read_state()
        plan = plan_alter_sync_state_set(
            state, self.replica_id, master_epoch, frozenset(new_set), sync_state_set_epoch, keeper.lease_id
        )
        return self._apply(plan, state)

    def _apply(self, plan: Plan, state: GroupState) -> ControllerResult:
        if plan.code != ControllerCode.SUCCESS:
            return ControllerResult(plan.code, plan.remark, state.master, state.sync_state)
        result = self.etcd.txn(plan.compares, plan.puts, plan.failure_reads(self.keys))
        if result.succeeded:
            return ControllerResult(ControllerCode.SUCCESS, "", plan.master, plan.sync_state)
        # Read back: our own first attempt may be what made the compares fail.
        found = GroupState.from_kvs(self.keys, [kv for r in result.results for kv in r.kvs], result.revision)
        if found.master == plan.master and found.sync_state == plan.sync_state:
            return ControllerResult(
                ControllerCode.SUCCESS, "applied by a retried attempt", plan.master, plan.sync_state
            )
        code = (
            ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH
            if found.master_epoch != state.master_epoch
            else ControllerCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
            if found.sync_state_set_epoch != state.sync_state_set_epoch
            else ControllerCode.CONTROLLER_BROKER_NOT_ALIVE
        )
        return ControllerResult(
            code, "the group changed while deciding; nothing written", found.master, found.sync_state
        )


class ElectionLoop:
    """Run on every replica: ``run_once()`` registers again if the lease was lost, and tries an
    election when the view shows no live master. Racing replicas are harmless: every election
    is a compare-and-swap on the keys it read, so one wins per masterEpoch and the others find
    MASTER_STILL_EXIST or a changed group."""

    def __init__(self, controller: ReplicaController, interval_s: float = 0.1) -> None:
        self.controller = controller
        self.interval_s = interval_s
        self.elections = 0
        self.last: ControllerResult | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"election-{controller.replica_id}", daemon=True)

    def run_once(self) -> ControllerResult | None:
        """One round: None when nothing was to be done."""
        controller = self.controller
        controller.view.run_once()
        if controller.lease_lost():
            controller.register()
        if not controller.view.state.needs_election():
            return None
        result = controller.elect_master()
        self.last = result
        if result.ok:
            self.elections += 1
        elif result.code not in (
            ControllerCode.CONTROLLER_MASTER_STILL_EXIST,
            ControllerCode.CONTROLLER_ELECT_MASTER_FAILED,
        ):
            log.info(
                "group %s: election by %d: %s %s",
                controller.keys.group,
                controller.replica_id,
                result.code.name,
                result.remark,
            )
        return result

    def start(self) -> ElectionLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except EtcdError as exc:
                log.info("group %s: election round failed: %s", self.controller.keys.group, exc)
            self._stopped.wait(self.interval_s)
