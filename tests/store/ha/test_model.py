"""The controller's decisions without etcd (services/coordination/group_state.py): DefaultElectPolicy's
order, what an election's and an alter's transactions compare on, and the JSON encodings."""

from __future__ import annotations

from services.coordination.group_keys import GroupKeys, MasterInfo, ReplicaInfo, SyncStateSet
from services.coordination.group_state import (
    ControllerCode,
    GroupState,
    elect_policy,
    plan_alter_sync_state_set,
    plan_elect_master,
)
from services.runtime.etcd import Compare, Event, KeyValue

KEYS = GroupKeys("g", "/test")


def kv(key: bytes, value: bytes, create: int, mod: int, lease: int = 0) -> KeyValue:
    return KeyValue(key, value, create, mod, 1, lease)


def member(
    broker_id: int, rev: int, epoch: int = 1, offset: int = 0, priority: int = 0, disk_full: bool = False
) -> KeyValue:
    info = ReplicaInfo(broker_id, f"h:{broker_id}", epoch, offset, priority, disk_full)
    return kv(KEYS.replica(broker_id), info.encode(), rev, rev, lease=100 + broker_id)


def group(master: int | None, in_sync: set[int], members: list[KeyValue], master_epoch: int = 1) -> GroupState:
    kvs = list(members)
    if master is not None:
        kvs.append(kv(KEYS.master, MasterInfo(master, f"h:{master}", master_epoch).encode(), 50, 50))
        kvs.append(kv(KEYS.sync_state_set, SyncStateSet(frozenset(in_sync), 4).encode(), 51, 51))
    return GroupState.from_kvs(KEYS, kvs, 60)


def test_the_key_layout_and_encodings() -> None:
    assert KEYS.master == b"/test/groups/g/master"
    assert KEYS.sync_state_set == b"/test/groups/g/syncStateSet"
    assert KEYS.replica(3) == b"/test/groups/g/replicas/3" and KEYS.replica_id(KEYS.replica(3)) == 3
    assert KEYS.replica_id(KEYS.master) is None
    assert GroupKeys("g").root == b"/pyrmq/groups/g/"
    sss = SyncStateSet(frozenset([3, 1]), 7)
    assert sss.encode() == b'{"syncStateSet":[1,3],"syncStateSetEpoch":7}'
    assert SyncStateSet.decode(sss.encode()) == sss
    master = MasterInfo(1, "h:1", 2, 3)
    assert MasterInfo.decode(master.encode()) == master
    info = ReplicaInfo(2, "h:2", 3, 4096, 1)
    assert ReplicaInfo.decode(info.encode()) == info
    full = ReplicaInfo(2, "h:2", 3, 4096, 1, diskFull=True)
    assert ReplicaInfo.decode(full.encode()) == full
    assert ReplicaInfo.decode(b'{"brokerId":2,"brokerAddr":"h:2"}').diskFull is False  # written before the field


def test_the_policy_prefers_the_old_master_then_epoch_then_offset_then_priority() -> None:
    members = [member(1, 10), member(2, 11, epoch=2, offset=10), member(3, 12, epoch=2, offset=20)]
    assert elect_policy(group(1, {1, 2, 3}, members)) == 1
    assert elect_policy(group(9, {1, 2, 3}, members)) == 3
    tied = [member(2, 11, offset=5, priority=2), member(3, 12, offset=5, priority=1)]
    assert elect_policy(group(9, {2, 3}, tied)) == 3
    assert (
        elect_policy(
            group(
                9,
                {1, 2, 3},
                members,
            ),
            prefer=2,
        )
        == 2
    )
    assert elect_policy(group(9, {1}, members), prefer=2) is None
    # Outside the SyncStateSet only when unclean.
    assert elect_policy(group(9, {9}, members)) is None
    assert elect_policy(group(9, {9}, members), unclean=True) == 3


def test_a_full_disk_is_passed_over_where_that_loses_nothing_acknowledged() -> None:
    """The chaos run's 9.9 s outage: the master paused just after a slave's disk filled, the two
    slaves tied, and the full one (the lower brokerId) was elected, refusing every put."""
    tied = [member(1, 10, offset=500, disk_full=True), member(2, 11, offset=500)]
    assert elect_policy(group(9, {1, 2}, tied)) == 2
    assert elect_policy(group(9, {1, 2}, tied), all_ack=True) == 2
    # Ahead of the other: with all-ack everything acknowledged is on both, so the writable one
    # wins; without, an acknowledged put may be on the full one only, so it still wins.
    ahead = [member(1, 10, epoch=3, offset=900, disk_full=True), member(2, 11, epoch=2, offset=500)]
    assert elect_policy(group(9, {1, 2}, ahead), all_ack=True) == 2
    assert elect_policy(group(9, {1, 2}, ahead)) == 1
    # Alone, a full replica is still elected (it serves reads; puts are refused until space is back).
    assert elect_policy(group(9, {1, 2}, [member(1, 10, disk_full=True)]), all_ack=True) == 1
    # Outside the SyncStateSet (unclean) the offset rules, as without all-ack.
    assert elect_policy(group(9, {9}, ahead), unclean=True, all_ack=True) == 1
    # The old master alive and a planned switch's target are not second-guessed.
    assert elect_policy(group(1, {1, 2}, ahead), all_ack=True) == 1
    assert elect_policy(group(9, {1, 2}, ahead), prefer=1, all_ack=True) == 1


def test_an_election_compares_on_what_it_was_decided_from() -> None:
    state = group(9, {1, 2}, [member(1, 10), member(2, 11, offset=99)], master_epoch=4)
    plan = plan_elect_master(state, requester=1)
    assert plan.code == ControllerCode.SUCCESS
    assert plan.master == MasterInfo(2, "h:2", 5, 1) and plan.sync_state == SyncStateSet(frozenset([2]), 5)
    assert set(plan.compares) == {
        Compare.mod_revision(KEYS.master, 50),
        Compare.mod_revision(KEYS.sync_state_set, 51),
        Compare.create_revision(KEYS.replica(2), 11),
        Compare.version(KEYS.replica(9), 0),
    }
    assert plan_elect_master(group(1, {1}, [member(1, 10)]), 1).code == ControllerCode.CONTROLLER_MASTER_STILL_EXIST
    # The master registered again after its election (create 70 > master's mod 50): a new
    # incarnation, so no live master, and it may be elected anew.
    again = group(1, {1}, [member(1, 70)])
    assert again.needs_election()
    replan = plan_elect_master(again, 1)
    assert replan.code == ControllerCode.SUCCESS and replan.master is not None and replan.master.masterEpoch == 2
    assert plan_elect_master(GroupState(KEYS), 1).code == ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert (
        plan_elect_master(group(9, {9}, [member(1, 10)]), None).code == ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
    )


def test_an_alter_is_refused_in_rocketmqs_order() -> None:
    state = group(1, {1}, [member(1, 10), member(2, 11)])
    ok = plan_alter_sync_state_set(state, 1, 1, frozenset([1, 2]), 4, lease=101)
    assert ok.code == ControllerCode.SUCCESS and ok.sync_state == SyncStateSet(frozenset([1, 2]), 5)
    assert Compare.create_revision(KEYS.replica(2), 11) in ok.compares
    refusals = [
        (
            plan_alter_sync_state_set(state, 1, 1, frozenset([1]), 4, 101),
            ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        ),
        (plan_alter_sync_state_set(state, 2, 1, frozenset([1, 2]), 4, 102), ControllerCode.CONTROLLER_INVALID_MASTER),
        (plan_alter_sync_state_set(state, 1, 1, frozenset([1, 2]), 4, 999), ControllerCode.CONTROLLER_INVALID_MASTER),
        (
            plan_alter_sync_state_set(state, 1, 0, frozenset([1, 2]), 4, 101),
            ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH,
        ),
        (
            plan_alter_sync_state_set(state, 1, 1, frozenset([1, 2]), 3, 101),
            ControllerCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
        ),
        (plan_alter_sync_state_set(state, 1, 1, frozenset([1, 3]), 4, 101), ControllerCode.CONTROLLER_BROKER_NOT_ALIVE),
        (
            plan_alter_sync_state_set(state, 1, 1, frozenset([2]), 4, 101),
            ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        ),
    ]
    assert [plan.code for plan, _ in refusals] == [code for _, code in refusals]
    assert all(not plan.puts for plan, _ in refusals)


def test_watched_events_update_the_state() -> None:
    state = group(1, {1}, [member(1, 10), member(2, 11)])
    gone = state.apply([Event("DELETE", KeyValue(KEYS.replica(1), b"", 0, 61, 0))])
    assert gone.needs_election() and set(gone.replicas) == {2} and gone.revision == 61
    moved = gone.apply([Event("PUT", kv(KEYS.master, MasterInfo(2, "h:2", 2).encode(), 50, 62))])
    assert moved.master_alive() and moved.master_epoch == 2 and moved.master_revision == 62
