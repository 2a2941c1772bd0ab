"""The controller's decisions without I/O: a group's state as read from etcd at one revision
(``GroupState``), who may be elected (``elect_policy``, RocketMQ's DefaultElectPolicy), and the
two changes, ``plan_elect_master`` and ``plan_alter_sync_state_set``, each as the checks of
RocketMQ's ReplicasInfoManager (same order, same response codes) followed by the etcd
transaction that applies it only if nothing it was decided from has changed since.

Fencing is the compare of every transaction on the ``mod_revision`` of the master and
SyncStateSet keys it read (a stale master or a stale epoch fails the compare, whatever it
believes) and on the ``create_revision`` of the membership keys it relies on (a replica that
lost its lease and registered again is a new incarnation, not the one that was checked).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from services.coordination.group_keys import GroupKeys, MasterInfo, ReplicaInfo, SyncStateSet
from services.runtime.etcd.model import Compare, Event, Get, KeyValue, Put


class ControllerCode(enum.IntEnum):
    """RocketMQ's controller response codes (remoting ResponseCode), those this controller uses."""

    SUCCESS = 0
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013


@dataclass(frozen=True)
class Member:
    """A live replica: its published info and the revisions of its membership key."""

    info: ReplicaInfo
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class GroupState:
    """A group's keys as of etcd revision ``revision``. ``*_revision`` is the key's
    mod_revision, 0 when the key does not exist (which is what etcd compares it with)."""

    keys: GroupKeys
    revision: int = 0
    master: MasterInfo | None = None
    master_revision: int = 0
    sync_state: SyncStateSet | None = None
    sync_state_revision: int = 0
    replicas: dict[int, Member] = field(default_factory=dict)

    @classmethod
    def from_kvs(cls, keys: GroupKeys, kvs: list[KeyValue] | tuple[KeyValue, ...], revision: int) -> GroupState:
        state = cls(keys, revision)
        for kv in kvs:
            state = state.put(kv)
        return replace(state, revision=revision)

    def put(self, kv: KeyValue) -> GroupState:
        """The state with one key set (a read or a watched PUT)."""
        if kv.key == self.keys.master:
            return replace(self, master=MasterInfo.decode(kv.value), master_revision=kv.mod_revision)
        if kv.key == self.keys.sync_state_set:
            return replace(self, sync_state=SyncStateSet.decode(kv.value), sync_state_revision=kv.mod_revision)
        broker_id = self.keys.replica_id(kv.key)
        if broker_id is None:
            return self
        replicas = dict(self.replicas)
        replicas[broker_id] = Member(ReplicaInfo.decode(kv.value), kv.create_revision, kv.mod_revision, kv.lease)
        return replace(self, replicas=replicas)

    def delete(self, key: bytes) -> GroupState:
        if key == self.keys.master:
            return replace(self, master=None, master_revision=0)
        if key == self.keys.sync_state_set:
            return replace(self, sync_state=None, sync_state_revision=0)
        broker_id = self.keys.replica_id(key)
        if broker_id is None or broker_id not in self.replicas:
            return self
        replicas = dict(self.replicas)
        del replicas[broker_id]
        return replace(self, replicas=replicas)

    def apply(self, events: list[Event]) -> GroupState:
        """The state after watched ``events`` (in revision order)."""
        state = self
        for ev in events:
            state = state.put(ev.kv) if ev.type == "PUT" else state.delete(ev.kv.key)
            state = replace(state, revision=max(state.revision, ev.kv.mod_revision))
        return state

    @property
    def master_epoch(self) -> int:
        return self.master.masterEpoch if self.master else 0

    @property
    def sync_state_set_epoch(self) -> int:
        return self.sync_state.syncStateSetEpoch if self.sync_state else 0

    @property
    def in_sync(self) -> frozenset[int]:
        return self.sync_state.syncStateSet if self.sync_state else frozenset()

    def master_alive(self) -> bool:
        """A master is named and the incarnation of it that was elected is still registered:
        its membership key exists and was created before the election wrote the master key (a
        master that lost its lease and registered again is a new incarnation, and no master)."""
        if self.master is None:
            return False
        member = self.replicas.get(self.master.masterBrokerId)
        return member is not None and member.create_revision < self.master_revision

    def needs_election(self) -> bool:
        return not self.master_alive()

    def is_master(self, broker_id: int, lease: int) -> bool:
        """Whether replica ``broker_id``, registered under ``lease``, is the live master."""
        member = self.replicas.get(broker_id)
        return (
            self.master_alive()
            and self.master is not None
            and self.master.masterBrokerId == broker_id
            and member is not None
            and member.lease == lease
        )


def elect_policy(
    state: GroupState,
    unclean: bool = False,
    prefer: int | None = None,
    old_master: int | None = None,
    all_ack: bool = False,
) -> int | None:
    """RocketMQ's DefaultElectPolicy: among the live replicas of the SyncStateSet (then, only
    when ``unclean``, among all live replicas): the old master if alive (and no other is
    preferred), else ``prefer`` if it is a candidate (else nobody), else the best by (highest
    epoch, highest maxOffset, lowest electionPriority, lowest brokerId).

    A replica whose disk is full would refuse every put as master: among equals it comes last,
    and with ``all_ack`` (every put acknowledged by every SyncStateSet member) it comes after
    every other member of the set whatever its offset, since passing over it loses nothing
    acknowledged: what the set acknowledged is on each of its members, and what only the full
    one holds never was. Without all-ack an acknowledged put may be on the full one alone."""
    old = state.master.masterBrokerId if old_master is None and state.master else old_master
    pools = [state.in_sync]
    if unclean:
        pools.append(frozenset(state.replicas))
    for pool in pools:
        alive = [state.replicas[i] for i in pool if i in state.replicas]
        if not alive:
            continue
        ids = {m.info.brokerId for m in alive}
        if old is not None and old in ids and prefer in (None, old):
            return old
        if prefer is not None:
            return prefer if prefer in ids else None
        writable_first = all_ack and pool is state.in_sync
        best = min(alive, key=lambda m: _rank(m.info, writable_first))
        return best.info.brokerId
    return None


def _rank(info: ReplicaInfo, writable_first: bool) -> tuple[int, ...]:
    """elect_policy's order (lowest first)."""
    order = (-info.epoch, -info.maxOffset, int(info.diskFull), info.electionPriority, info.brokerId)
    return (int(info.diskFull), *order) if writable_first else order


@dataclass(frozen=True)
class Plan:
    """A decided change: the transaction that applies it, and the state it aims at. ``code``
    other than SUCCESS means nothing is to be written (and says why)."""

    code: ControllerCode
    remark: str = ""
    compares: tuple[Compare, ...] = ()
    puts: tuple[Put, ...] = ()
    master: MasterInfo | None = None
    sync_state: SyncStateSet | None = None

    def failure_reads(self, keys: GroupKeys) -> tuple[Get, ...]:
        """What the transaction reads back when its compares fail (to see what won)."""
        return (Get(keys.master), Get(keys.sync_state_set))


def _refused(code: ControllerCode, remark: str) -> Plan:
    return Plan(code, remark)


def _unchanged(state: GroupState) -> list[Compare]:
    return [
        Compare.mod_revision(state.keys.master, state.master_revision),
        Compare.mod_revision(state.keys.sync_state_set, state.sync_state_revision),
    ]


def _still_registered(state: GroupState, broker_id: int) -> Compare:
    return Compare.create_revision(state.keys.replica(broker_id), state.replicas[broker_id].create_revision)


def plan_elect_master(
    state: GroupState,
    requester: int | None,
    unclean: bool = False,
    prefer: int | None = None,
    all_ack: bool = False,
) -> Plan:
    """RocketMQ's electMaster on ``state``. The first election of a group (no master ever)
    elects the requester, if it is registered; later ones follow ``elect_policy``. A new master
    gets masterEpoch + 1 and the SyncStateSet {new master} with syncStateSetEpoch + 1. The
    transaction requires the master and SyncStateSet keys unchanged, the old master's membership
    still absent (if it was), and the new master's membership the one that was read."""
    keys = state.keys
    if state.master is None and state.sync_state is None:
        if requester is None or requester not in state.replicas:
            return _refused(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "first election: requester not registered"
            )
        new_master: int | None = requester
    else:
        new_master = elect_policy(state, unclean, prefer, all_ack=all_ack)
    old = state.master.masterBrokerId if state.master else None
    if new_master is not None and new_master == old and state.master_alive():
        return _refused(ControllerCode.CONTROLLER_MASTER_STILL_EXIST, f"master {old} is still alive")
    if new_master is None:
        code = (
            ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
            if requester is None
            else ControllerCode.CONTROLLER_ELECT_MASTER_FAILED
        )
        return _refused(code, f"no live replica to elect (syncStateSet {sorted(state.in_sync)}, unclean={unclean})")
    compares = _unchanged(state) + [_still_registered(state, new_master)]
    if old is not None and old != new_master:
        # The old master stays gone, or stays the stale incarnation that was read.
        gone = old not in state.replicas
        compares.append(Compare.version(keys.replica(old), 0) if gone else _still_registered(state, old))
    info = state.replicas[new_master].info
    master = MasterInfo(new_master, info.brokerAddr, state.master_epoch + 1, -1 if requester is None else requester)
    sync_state = SyncStateSet(frozenset([new_master]), state.sync_state_set_epoch + 1)
    puts = (Put(keys.master, master.encode()), Put(keys.sync_state_set, sync_state.encode()))
    return Plan(ControllerCode.SUCCESS, "", tuple(compares), puts, master, sync_state)


def plan_alter_sync_state_set(
    state: GroupState,
    master_id: int,
    master_epoch: int,
    new_set: frozenset[int],
    sync_state_set_epoch: int,
    lease: int,
) -> Plan:
    """RocketMQ's alterSyncStateSet, asked by replica ``master_id`` (registered under ``lease``)
    believing it is master at ``master_epoch`` with a SyncStateSet at ``sync_state_set_epoch``:
    refused unless all three are current and it is the elected incarnation, every replica of
    ``new_set`` is alive and the master stays in it. The new set gets syncStateSetEpoch + 1."""
    if state.master is None or state.sync_state is None:
        return _refused(ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the group has no master yet")
    if new_set == state.in_sync:
        return _refused(ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the syncStateSet is already that")
    if state.master.masterBrokerId != master_id:
        return _refused(
            ControllerCode.CONTROLLER_INVALID_MASTER, f"the master is {state.master.masterBrokerId}, not {master_id}"
        )
    if not state.is_master(master_id, lease):
        return _refused(
            ControllerCode.CONTROLLER_INVALID_MASTER,
            f"replica {master_id} under lease {lease:x} is not the live master",
        )
    if state.master_epoch != master_epoch:
        return _refused(
            ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH, f"masterEpoch is {state.master_epoch}, not {master_epoch}"
        )
    if state.sync_state_set_epoch != sync_state_set_epoch:
        return _refused(
            ControllerCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            f"syncStateSetEpoch is {state.sync_state_set_epoch}, not {sync_state_set_epoch}",
        )
    for replica in sorted(new_set):
        if replica not in state.replicas:
            return _refused(ControllerCode.CONTROLLER_BROKER_NOT_ALIVE, f"replica {replica} is not alive")
    if master_id not in new_set:
        return _refused(
            ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"the master {master_id} must stay in it"
        )
    compares = _unchanged(state) + [_still_registered(state, r) for r in sorted(new_set)]
    sync_state = SyncStateSet(frozenset(new_set), state.sync_state_set_epoch + 1)
    puts = (Put(state.keys.sync_state_set, sync_state.encode()),)
    return Plan(ControllerCode.SUCCESS, "", tuple(compares), puts, state.master, sync_state)
