"""A planned master switch (RocketMQ's ``mqadmin electMaster -b target``), run by the current
master of a group in controller mode (``MasterSwitch.switch``, the store's SwitchMaster RPC).

1. Checks: this replica is the writable master; the target is another live member of the
   SyncStateSet with a replication session (its confirmations are what the switch waits for).
2. **Pause**: new puts are refused (SERVICE_NOT_AVAILABLE, which brokers and clients retry).
3. Wait until the target has confirmed the CommitLog's max phy_offset (bounded by the timeout).
4. **Hand over**: from here no put is acknowledged (``handing_over``: the WriteGate's last
   check before an acknowledgement fails); wait again for the max phy_offset as it is now, so
   that every put acknowledged before this point (admitted before the pause, appended, and
   acknowledged while the first wait ran) is confirmed by the target too.
5. The election transaction: masterEpoch + 1 naming the target (``elect_master(prefer=...)``,
   the same compare-and-swap as a failover, on the master and SyncStateSet keys as read and on
   both memberships). The new SyncStateSet is {target}, as after any election (RocketMQ's
   electMaster); the old master rejoins it once its new master sees it caught up.
6. The old master keeps refusing until its view shows the new master; it then follows it as a
   slave (controller_mode.py), cutting any tail a racing, unacknowledged put left.

A timeout in 3 or 4, a target that disconnects, or a transaction that loses a race ends the
pause: writes resume under the same epoch, nothing changed in etcd. When the transaction's
outcome is unknown (etcd unreachable after sending it) the pause stays until ``settle()`` finds
out from etcd which way it went.

So no acknowledged message is lost: every acknowledged put ended at or below the offset the
target confirmed before the transaction, and the target starts its epoch at its own max
phy_offset, above it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.runtime.clock import Clock
from services.runtime.etcd import EtcdError
from services.store.errors import MasterSwitchError, MasterSwitchTimeoutError, NotMasterError
from services.store.ha.controller import ReplicaController

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.002  # how often the wait re-reads the target's confirmed offset
VIEW_WAIT_S = 5.0  # how long the old master waits to see the new one in its view


@dataclass(frozen=True)
class SwitchResult:
    master_id: int
    master_address: str
    master_epoch: int
    handover_offset: int  # the old master's max phy_offset, confirmed by the target
    paused_ms: int  # how long puts were refused


class MasterSide(Protocol):
    """What the switch needs of the master's controller mode (ha/controller_mode.py)."""

    replica_id: int
    controller: ReplicaController

    def in_sync_set(self) -> frozenset[int]: ...
    def max_offset(self) -> int: ...
    def confirmed_by(self, replica_id: int) -> int | None: ...


class MasterSwitch:
    """The pause flags the master's WriteGate reads, and the switch itself (one at a time)."""

    def __init__(self, master: MasterSide, clock: Clock, sleep: Callable[[float], object] | None = None) -> None:
        self._master = master
        self._clock = clock
        self._sleep = sleep or threading.Event().wait
        self._lock = threading.Lock()  # one switch at a time
        self.paused = False  # new puts refused
        self.handing_over = False  # no put acknowledged
        self._unresolved_epoch: int | None = None  # the epoch whose handover's outcome is unknown
        self.switches_total = 0

    def reset(self) -> None:
        """A new role (master of a new term, or slave): no switch of the old term applies."""
        self.paused = self.handing_over = False
        self._unresolved_epoch = None

    def switch(self, target: int, timeout_s: float) -> SwitchResult:
        if not self._lock.acquire(blocking=False):
            raise MasterSwitchError("a master switch is already in progress")
        try:
            return self._switch_locked(target, timeout_s)
        finally:
            self._lock.release()

    def _switch_locked(self, target: int, timeout_s: float) -> SwitchResult:
        master, controller = self._master, self._master.controller
        epoch = controller.master_epoch()
        if epoch is None or not controller.is_master_writable():
            raise NotMasterError(f"replica {master.replica_id} is not the writable master of its group")
        if target == master.replica_id:
            raise MasterSwitchError(f"replica {target} is the master already")
        if target not in controller.view.state.replicas:
            raise MasterSwitchError(f"replica {target} is not alive (no membership in etcd)")
        if target not in master.in_sync_set():
            raise MasterSwitchError(
                f"replica {target} is not in the SyncStateSet {sorted(master.in_sync_set())}: only an in-sync "
                "replica can take over without losing acknowledged messages"
            )
        if master.confirmed_by(target) is None:
            raise MasterSwitchError(f"replica {target} has no replication session with this master")
        started_s = self._clock.monotonic_s()
        deadline_s = started_s + timeout_s
        handed_over = False
        self.paused = True
        log.info("group %s: planned switch to replica %d: puts paused", controller.keys.group, target)
        try:
            self._wait_confirmed(target, deadline_s)
            self.handing_over = True
            offset = self._wait_confirmed(target, deadline_s)
            try:
                result = controller.elect_master(prefer=target)
            except EtcdError:
                self._unresolved_epoch = epoch
                handed_over = True  # unknown: stay paused until settle() knows
                raise
            if not result.ok or result.master is None or result.master.masterBrokerId != target:
                raise MasterSwitchError(f"the handover was refused: {result.code.name} {result.remark}".strip())
            handed_over = True
            self.switches_total += 1
            new_master = result.master
            controller.view.wait_for(
                lambda s: s.master is not None and s.master.masterEpoch >= new_master.masterEpoch, VIEW_WAIT_S
            )
            paused_ms = round((self._clock.monotonic_s() - started_s) * 1000)
            log.info(
                "group %s: replica %d handed over to %d at masterEpoch %d, phy_offset %d (puts paused %d ms)",
                controller.keys.group,
                master.replica_id,
                target,
                new_master.masterEpoch,
                offset,
                paused_ms,
            )
            return SwitchResult(target, new_master.masterAddress, new_master.masterEpoch, offset, paused_ms)
        finally:
            if not handed_over:
                self.paused = self.handing_over = False
                log.info("group %s: planned switch to %d abandoned: puts resumed", controller.keys.group, target)

    def _wait_confirmed(self, target: int, deadline_s: float) -> int:
        """Until the target confirmed the CommitLog's max phy_offset (as it is when it does)."""
        master = self._master
        while True:
            end = master.max_offset()
            confirmed = master.confirmed_by(target)
            if confirmed is None:
                raise MasterSwitchError(f"replica {target} disconnected during the switch")
            if confirmed >= end:
                return end
            if self._clock.monotonic_s() >= deadline_s:
                raise MasterSwitchTimeoutError(
                    f"replica {target} confirmed phy_offset {confirmed} of {end} in time: switch abandoned, "
                    "writes resumed"
                )
            self._sleep(POLL_INTERVAL_S)

    def settle(self) -> None:
        """After a handover whose transaction's outcome was unknown: resume writes if etcd
        shows this replica still master at the epoch it had (the transaction did not apply)."""
        epoch = self._unresolved_epoch
        if epoch is None or self._lock.locked():
            return
        state = self._master.controller.read_state()  # raises EtcdError while unreachable
        if state.master is not None and state.master.masterBrokerId == self._master.replica_id:
            if state.master.masterEpoch == epoch:
                log.info("the planned switch did not apply: puts resumed")
                self.reset()


@runtime_checkable
class Switchable(Protocol):
    """A replica's controller mode (ha/controller_mode.py), as the SwitchMaster call reaches it."""

    def switch_master(self, target: int, timeout_s: float) -> SwitchResult: ...


def switch_master(coordinator: object, target: int, timeout_s: float) -> SwitchResult:
    """The SwitchMaster call on a replica whose coordinator is ``coordinator`` (None: static roles)."""
    if not isinstance(coordinator, Switchable):
        raise MasterSwitchError("this store's roles are static (no etcd_endpoints): a switch needs controller mode")
    if not timeout_s > 0:
        raise ValueError(f"a switch needs a timeout above 0, not {timeout_s}")
    return coordinator.switch_master(target, timeout_s)
