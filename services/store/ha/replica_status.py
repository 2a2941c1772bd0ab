"""The replica set as one replica sees it: ``group_status`` (the store's GetReplicaStatus,
``pyrmq status``) and ``replication_stats`` (the Prometheus metrics, services/store/metrics.py).

Who knows what:

* A **master** knows its connected slaves' progress first-hand (their acks on the Replicate
  streams: ``HAService.slaves()``), and in controller mode the group's live members, with the
  offset and epoch each last published, from its etcd view.
* A **slave or candidate** in controller mode knows the members from its view only; lag there is
  the master's published offset minus the replica's, and its age is unknown (-1).
* With static roles a slave knows only itself and its master's address.

**Lag** of a slave, on the master: ``lag_bytes`` = the master's max phy_offset minus the slave's
confirmed offset (what the slave keeps across a crash of its process: what a SYNC put waits
for); ``lag_seconds`` = how old the oldest byte the slave has not confirmed is: now minus the
store timestamp of the record at its confirmed offset (0 when it has everything). This is the
age of the data a failover to it would lose, which "time since it last caught up" is not (a slave
can be one byte short of the end for a minute under steady load without being a minute behind).

**in_sync**: in controller mode, membership of the SyncStateSet (the master's own set, which may
be newer than the view's); with static roles, a connected slave whose oldest unconfirmed byte is
younger than ha_max_time_slave_not_catchup_ms (the rule by which a controller-mode master drops
a slave from its set). The master is always in sync; a store without replication is a group of
one replica, master and in sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.coordination.group_state import GroupState
from services.runtime.clock import Clock
from services.store.config import StoreConfig
from services.store.ha.epoch_file import EpochFile
from services.store.ha.ha_client import HAClient
from services.store.ha.ha_service import HAService
from services.store.log.commitlog import CommitLog

MASTER, SLAVE, CANDIDATE = "MASTER", "SLAVE", "CANDIDATE"


@dataclass(frozen=True)
class ReplicaState:
    replica_id: int
    role: str  # MASTER, SLAVE, CANDIDATE; "" when not known here
    address: str
    epoch: int
    max_offset: int
    confirmed_offset: int
    in_sync: bool
    lag_bytes: int
    lag_seconds: float  # -1: not known here
    connected: bool


@dataclass(frozen=True)
class GroupStatus:
    group: str
    replica_id: int  # who answered
    broker_role: str
    controller_mode: bool
    master_id: int  # -1: none known
    master_address: str
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    replicas: tuple[ReplicaState, ...]

    @property
    def me(self) -> ReplicaState:
        return next(r for r in self.replicas if r.replica_id == self.replica_id)


@dataclass(frozen=True)
class ReplicationStats:
    """What the store's metrics read at scrape time."""

    role: str  # this replica's
    epoch: int  # the last epoch its log holds
    master_epoch: int
    sync_state_set_size: int
    lags: tuple[tuple[int, int, float], ...]  # on a master: (replica id, lag bytes, lag seconds)
    elections_won_total: int
    elections_timed_total: int
    election_seconds_sum: float
    last_election_seconds: float
    ha_not_available_total: int
    slave_timeout_total: int
    switches_total: int


@runtime_checkable
class Coordinated(Protocol):
    """The controller mode's parts read here (ha/controller_mode.py)."""

    @property
    def view_state(self) -> GroupState: ...
    def in_sync_set(self) -> frozenset[int]: ...
    def election_figures(self) -> tuple[int, int, float, float, int]: ...


class Replicated(Protocol):
    """The replica's role (ha/replication.py)."""

    config: StoreConfig
    clock: Clock
    commitlog: CommitLog
    epoch_file: EpochFile
    client: HAClient
    master_epoch: int
    ha_not_available_total: int
    slave_timeout_total: int

    @property
    def master_address(self) -> str: ...
    @property
    def ha_service(self) -> HAService | None: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def is_slave(self) -> bool: ...
    @property
    def coordinator(self) -> object: ...


def lag_seconds(commitlog: CommitLog, confirmed: int, max_offset: int, now_ms: int) -> float:
    """How old the oldest byte after ``confirmed`` is (0: nothing after it; -1: unknown)."""
    if confirmed >= max_offset:
        return 0.0
    ts = commitlog.store_timestamp_at(confirmed)
    if ts < 0:  # a blank record at a segment's end: the next record starts the next segment
        file_size = commitlog.config.commitlog_file_size_bytes
        following = confirmed - confirmed % file_size + file_size
        ts = commitlog.store_timestamp_at(following) if following < max_offset else -1
    return max(0.0, (now_ms - ts) / 1000) if ts >= 0 else -1.0


def group_status(replication: Replicated) -> GroupStatus:
    config, commitlog = replication.config, replication.commitlog
    coordinator = replication.coordinator
    mode = coordinator if isinstance(coordinator, Coordinated) else None
    state = mode.view_state if mode is not None else None
    now_ms = replication.clock.now_ms()
    me_id = config.replica_id
    max_offset = commitlog.max_offset
    epoch = max(replication.epoch_file.last_epoch, 0)
    role = MASTER if replication.is_master else SLAVE if replication.is_slave else CANDIDATE
    confirmed = max_offset if replication.is_master else replication.client.progress().confirmed_offset
    members = state.replicas if state is not None else {}

    def address(replica_id: int) -> str:
        member = members.get(replica_id)
        return member.info.brokerAddr if member is not None else ""

    limit_s = config.ha_max_time_slave_not_catchup_ms / 1000
    replicas: dict[int, ReplicaState] = {}
    if replication.is_master:
        in_sync = mode.in_sync_set() if mode is not None else None
        replicas[me_id] = ReplicaState(
            me_id, MASTER, config.registered_address, epoch, max_offset, max_offset, True, 0, 0.0, True
        )
        ha = replication.ha_service
        for slave in ha.slaves() if ha is not None else []:
            age = lag_seconds(commitlog, slave.confirmed_offset, max_offset, now_ms)
            member = members.get(slave.replica_id)
            replicas[slave.replica_id] = ReplicaState(
                slave.replica_id,
                SLAVE,
                address(slave.replica_id),
                member.info.epoch if member is not None else epoch,
                slave.max_phy_offset,
                slave.confirmed_offset,
                slave.replica_id in in_sync if in_sync is not None else 0 <= age <= limit_s,
                max(0, max_offset - slave.confirmed_offset),
                age,
                True,
            )
        for replica_id, member in sorted(members.items()):
            if replica_id not in replicas:  # alive, not connected
                reported = member.info.maxOffset
                replicas[replica_id] = ReplicaState(
                    replica_id,
                    SLAVE,
                    member.info.brokerAddr,
                    member.info.epoch,
                    reported,
                    reported,
                    in_sync is not None and replica_id in in_sync,
                    max(0, max_offset - reported),
                    lag_seconds(commitlog, reported, max_offset, now_ms),
                    False,
                )
        master_id, master_address, master_epoch = me_id, config.registered_address, replication.master_epoch or epoch
        sync_set = in_sync if in_sync is not None else frozenset(i for i, r in replicas.items() if r.in_sync)
    else:
        master_id, master_address, master_epoch = -1, replication.master_address, 0
        sync_set = frozenset()
        master_reported = -1
        if state is not None:
            sync_set = state.in_sync
            if state.master_alive() and state.master is not None:
                master_id, master_address = state.master.masterBrokerId, state.master.masterAddress
                master_epoch = state.master.masterEpoch
                master_member = members.get(master_id)
                master_reported = master_member.info.maxOffset if master_member is not None else -1
        for replica_id, member in sorted(members.items()):
            reported = member.info.maxOffset
            replicas[replica_id] = ReplicaState(
                replica_id,
                MASTER if replica_id == master_id else SLAVE if master_id >= 0 else CANDIDATE,
                member.info.brokerAddr,
                member.info.epoch,
                reported,
                reported,
                replica_id in sync_set,
                0 if replica_id == master_id else max(0, master_reported - reported) if master_reported >= 0 else -1,
                0.0 if replica_id == master_id else -1.0,
                replica_id == master_id or replica_id == me_id and replication.is_slave,
            )
        lag = max(0, master_reported - confirmed) if master_reported >= 0 else -1
        replicas[me_id] = ReplicaState(
            me_id,
            role,
            config.registered_address,
            epoch,
            max_offset,
            confirmed,
            me_id in sync_set,
            lag,
            -1.0,
            replication.is_slave,
        )
    return GroupStatus(
        config.broker_name,
        me_id,
        config.broker_role.value,
        mode is not None,
        master_id,
        master_address,
        master_epoch,
        tuple(sorted(sync_set)),
        state.sync_state_set_epoch if state is not None else 0,
        tuple(replicas[i] for i in sorted(replicas)),
    )


def replication_stats(replication: Replicated) -> ReplicationStats:
    status = group_status(replication)
    me = status.me
    coordinator = replication.coordinator
    won = timed = switches = 0
    seconds_sum = last = 0.0
    if isinstance(coordinator, Coordinated):
        won, timed, seconds_sum, last, switches = coordinator.election_figures()
    lags = tuple((r.replica_id, r.lag_bytes, r.lag_seconds) for r in status.replicas) if me.role == MASTER else ()
    return ReplicationStats(
        me.role,
        me.epoch,
        status.master_epoch,
        len(status.sync_state_set),
        lags,
        won,
        timed,
        seconds_sum,
        last,
        replication.ha_not_available_total,
        replication.slave_timeout_total,
        switches,
    )
