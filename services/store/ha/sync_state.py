"""How a master decides to grow or shrink its SyncStateSet (RocketMQ's AutoSwitchHAService),
and the loop that asks etcd for the change (``SyncStateSetLoop``).

A slave joins when it has everything the set has confirmed (its max offset >= the master's
confirm offset) and something of the current master's own epoch (>= that epoch's start offset,
so a slave that is far along an old master's history is not counted as holding this one's). A
slave leaves when it has not caught up for ``ha_max_time_slave_not_catchup_ms`` (RocketMQ's
haMaxTimeSlaveNotCatchup, 15 s), when it is in the set without a connection, or when its
membership key is gone from etcd (its lease expired: a paused or partitioned slave), so SYNC
puts wait for a silent slave about a lease TTL, not the 15 s. "Caught up" is
reported by the replication connection (``caught_up``): the slave acknowledged all the master
had when it last sent.

While a change is asked for and not yet applied, ``effective()`` is the union of the set in
force and the one asked for: what the confirm offset must wait for, since either may be the one
etcd ends up holding (RocketMQ's "synchronizing" set).
"""

from __future__ import annotations

import logging
import threading

from services.coordination.group_keys import SyncStateSet
from services.runtime.clock import Clock
from services.store.ha.controller import ControllerResult, ReplicaController

log = logging.getLogger(__name__)

DEFAULT_HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS = 15_000


class SyncStateSetTracker:
    """The master's view of which slaves are in sync. Not thread-safe: one owner (the master's
    HA service) calls it, or it is guarded by the caller."""

    def __init__(
        self,
        master_id: int,
        clock: Clock,
        ha_max_time_slave_not_catchup_ms: int = DEFAULT_HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS,
    ) -> None:
        self.master_id = master_id
        self.clock = clock
        self.ha_max_time_slave_not_catchup_ms = ha_max_time_slave_not_catchup_ms
        self.local: frozenset[int] = frozenset([master_id])
        self.local_epoch = 0
        self.synchronizing: frozenset[int] | None = None
        self.epoch_start_offset = 0
        self.caught_up_ms: dict[int, int] = {}

    def reset(self, sync_state: SyncStateSet, epoch_start_offset: int) -> None:
        """On becoming master: the set etcd holds ({master}) and where the master's own epoch
        starts in the CommitLog (its epoch file's last entry)."""
        self.local, self.local_epoch = sync_state.syncStateSet, sync_state.syncStateSetEpoch
        self.synchronizing = None
        self.epoch_start_offset = epoch_start_offset

    def effective(self) -> frozenset[int]:
        return self.local | (self.synchronizing or frozenset())

    def caught_up(self, slave_id: int, at_ms: int | None = None) -> None:
        """Slave ``slave_id`` acknowledged everything the master had at ``at_ms``."""
        at = self.clock.now_ms() if at_ms is None else at_ms
        self.caught_up_ms[slave_id] = max(self.caught_up_ms.get(slave_id, at), at)

    def disconnected(self, slave_id: int) -> None:
        self.caught_up_ms.pop(slave_id, None)

    def maybe_expand(self, slave_id: int, slave_max_offset: int, confirm_offset: int) -> frozenset[int] | None:
        """The set with ``slave_id`` added, if it qualifies and is not in it already."""
        current = self.synchronizing or self.local
        if slave_id in current or slave_id == self.master_id:
            return None
        if slave_max_offset >= confirm_offset and slave_max_offset >= self.epoch_start_offset:
            return current | {slave_id}
        return None

    def maybe_shrink(self, now_ms: int | None = None, alive: frozenset[int] | None = None) -> frozenset[int] | None:
        """The set without the slaves that have not caught up for too long, are not connected
        or (``alive``: the replicas registered in etcd) have lost their lease, if that removes any."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        current = self.synchronizing or self.local
        keep = {
            i
            for i in current
            if i == self.master_id
            or (
                i in self.caught_up_ms
                and now - self.caught_up_ms[i] <= self.ha_max_time_slave_not_catchup_ms
                and (alive is None or i in alive)
            )
        }
        return frozenset(keep) if keep != current else None

    def asking(self, new_set: frozenset[int]) -> None:
        self.synchronizing = new_set

    def settled(self, sync_state: SyncStateSet | None) -> None:
        """The ask ended, or etcd's set was seen: adopt it if newer (None: unknown)."""
        if sync_state is not None and sync_state.syncStateSetEpoch > self.local_epoch:
            self.local, self.local_epoch = sync_state.syncStateSet, sync_state.syncStateSetEpoch
        self.synchronizing = None


class SyncStateSetLoop:
    """The master's loop: ``run_once()`` shrinks the SyncStateSet if a slave fell behind too
    long, through ``controller.alter_sync_state_set``; ``offer(slave, offset, confirm)``
    expands it when a slave qualifies. Does nothing unless this replica is the writable master."""

    def __init__(self, controller: ReplicaController, tracker: SyncStateSetTracker) -> None:
        self.controller = controller
        self.tracker = tracker
        self._lock = threading.Lock()

    def run_once(self) -> ControllerResult | None:
        with self._lock:
            if not self._sync_with_view():
                return None
            proposal = self.tracker.maybe_shrink(alive=frozenset(self.controller.view.state.replicas))
            return None if proposal is None else self._ask(proposal)

    def offer(self, slave_id: int, slave_max_offset: int, confirm_offset: int) -> ControllerResult | None:
        with self._lock:
            if not self._sync_with_view():
                return None
            proposal = self.tracker.maybe_expand(slave_id, slave_max_offset, confirm_offset)
            return None if proposal is None else self._ask(proposal)

    def _sync_with_view(self) -> bool:
        if not self.controller.is_master_writable():
            return False
        if self.tracker.synchronizing is None:
            self.tracker.settled(self.controller.view.state.sync_state)
        return True

    def _ask(self, proposal: frozenset[int]) -> ControllerResult:
        self.tracker.asking(proposal)
        # The epochs this master knows: its own alters' answers, which the view may not show yet.
        result = self.controller.alter_sync_state_set(
            proposal, self.controller.master_epoch(), self.tracker.local_epoch
        )
        self.tracker.settled(result.sync_state)
        log.info(
            "group %s: syncStateSet %s asked by master %d: %s",
            self.controller.keys.group,
            sorted(proposal),
            self.controller.replica_id,
            result.code.name,
        )
        return result
