"""The replica set's coordination (services/store/ha/) against real etcd: the first election,
the SyncStateSet changed only by the current master at the current epochs, a stale master
fenced, failover after a master's lease is lost, no unclean election unless enabled, racing
elections, an etcd leader kill, and a master that stops being writable before its lease ends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from services.coordination.group_keys import GroupKeys, ReplicaInfo
from services.coordination.group_state import ControllerCode as Code
from services.runtime.clock import ManualClock, SystemClock
from services.runtime.etcd.rpc.client import EtcdClient
from services.store.ha.controller import ControllerResult, ElectionLoop, ReplicaController
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.needs("etcd")

TTL_MS = 2000
GROUP = "broker-a"


@pytest.fixture
def etcd(etcd_server: EtcdCluster) -> Iterator[EtcdClient]:
    with EtcdClient(etcd_server.endpoints, timeout_s=3.0, attempt_timeout_s=0.5) as client:
        yield client


def replica(etcd: EtcdClient, replica_id: int, clock=None, **kwargs) -> ReplicaController:
    return ReplicaController(
        GROUP, replica_id, f"127.0.0.1:{10910 + replica_id}", etcd, clock or SystemClock(), TTL_MS, **kwargs
    )


def started(etcd: EtcdClient, *ids: int, **kwargs) -> list[ReplicaController]:
    return [replica(etcd, i, **kwargs).start() for i in ids]


def race(loops: list[ElectionLoop]) -> list[ControllerResult | None]:
    """One ElectionLoop round on each replica at once (released together by a barrier)."""
    barrier = threading.Barrier(len(loops))
    results: list[ControllerResult | None] = []

    def run(loop: ElectionLoop) -> None:
        barrier.wait()
        results.append(loop.run_once())

    threads = [threading.Thread(target=run, args=(loop,)) for loop in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10.0)
    return results


def stop_all(*controllers: ReplicaController) -> None:
    for c in controllers:
        c.stop()


def test_the_first_registered_replica_becomes_master_at_epoch_1(etcd: EtcdClient) -> None:
    a, b = started(etcd, 1, 2)
    try:
        first = a.elect_master()
        assert first.code == Code.SUCCESS
        assert first.master is not None and (first.master.masterBrokerId, first.master.masterEpoch) == (1, 1)
        assert first.sync_state is not None and (first.sync_state.syncStateSet, first.sync_state.syncStateSetEpoch) == (
            frozenset([1]),
            1,
        )
        assert b.elect_master().code == Code.CONTROLLER_MASTER_STILL_EXIST
        keys = GroupKeys(GROUP)
        master_kv, sss_kv, member_kv = etcd.get(keys.master), etcd.get(keys.sync_state_set), etcd.get(keys.replica(1))
        assert master_kv and sss_kv and member_kv
        assert json.loads(master_kv.value) == {
            "masterBrokerId": 1,
            "masterAddress": "127.0.0.1:10911",
            "masterEpoch": 1,
            "electedBy": 1,
        }
        assert json.loads(sss_kv.value) == {"syncStateSet": [1], "syncStateSetEpoch": 1}
        assert member_kv.lease == a.keeper.lease_id and json.loads(member_kv.value)["brokerAddr"] == "127.0.0.1:10911"
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        assert a.is_master_writable() and not b.is_master_writable()
        assert b.view.state.master == first.master
    finally:
        stop_all(a, b)


def test_the_sync_state_set_changes_only_through_the_master_at_the_current_epochs(etcd: EtcdClient) -> None:
    a, b, c = started(etcd, 1, 2, 3)
    try:
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        grown = a.alter_sync_state_set({1, 2})
        assert grown.ok and grown.sync_state is not None
        assert (grown.sync_state.syncStateSet, grown.sync_state.syncStateSetEpoch) == (frozenset([1, 2]), 2)
        assert a.view.wait_for(lambda s: s.sync_state_set_epoch == 2, 2.0)
        # Only the master, and only at the current masterEpoch and syncStateSetEpoch.
        assert b.alter_sync_state_set({1, 2, 3}).code == Code.CONTROLLER_INVALID_MASTER
        assert a.alter_sync_state_set({1, 2, 3}, master_epoch=0).code == Code.CONTROLLER_FENCED_MASTER_EPOCH
        stale = a.alter_sync_state_set({1, 2, 3}, sync_state_set_epoch=1)
        assert stale.code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        # The master stays in the set, members must be alive, and a no-op is refused.
        assert a.alter_sync_state_set({2, 3}).code == Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        assert a.alter_sync_state_set({1, 2, 9}).code == Code.CONTROLLER_BROKER_NOT_ALIVE
        assert a.alter_sync_state_set({1, 2}).code == Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        shrunk = a.alter_sync_state_set({1}, sync_state_set_epoch=2)
        assert shrunk.ok and shrunk.sync_state is not None
        assert (shrunk.sync_state.syncStateSet, shrunk.sync_state.syncStateSetEpoch) == (frozenset([1]), 3)
        state = a.read_state()
        assert (state.in_sync, state.sync_state_set_epoch, state.master_epoch) == (frozenset([1]), 3, 1)
    finally:
        stop_all(a, b, c)


def test_a_stale_master_can_neither_alter_nor_win(etcd: EtcdClient) -> None:
    a, b = started(etcd, 1, 2)
    try:
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        assert a.alter_sync_state_set({1, 2}).ok
        assert a.view.wait_for(lambda s: s.sync_state_set_epoch == 2, 2.0)
        a.keeper.stop(revoke=True)  # the master's lease ends: its membership key goes
        assert not a.is_master_writable()
        elected = b.elect_master()
        assert elected.ok and elected.master is not None and elected.sync_state is not None
        assert (elected.master.masterBrokerId, elected.master.masterEpoch) == (2, 2)
        assert (elected.sync_state.syncStateSet, elected.sync_state.syncStateSetEpoch) == (frozenset([2]), 3)
        # The old master comes back as a new incarnation, still believing in epochs 1 and 2.
        a.register()
        assert (
            a.alter_sync_state_set({1, 2}, master_epoch=1, sync_state_set_epoch=2).code
            == Code.CONTROLLER_INVALID_MASTER
        )
        assert a.elect_master().code == Code.CONTROLLER_MASTER_STILL_EXIST
        assert a.view.wait_for(lambda s: s.master_epoch == 2 and s.master_alive(), 2.0)
        assert not a.is_master_writable() and a.master_epoch() is None
        assert b.view.wait_for(lambda s: s.master_alive(), 2.0) and b.is_master_writable()
        state = b.read_state()
        assert (state.master_epoch, state.in_sync, state.sync_state_set_epoch) == (2, frozenset([2]), 3)
    finally:
        stop_all(a, b)


def test_a_master_registered_again_is_a_new_incarnation_and_is_elected_anew(etcd: EtcdClient) -> None:
    (a,) = started(etcd, 1)
    try:
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0) and a.is_master_writable()
        a.register()  # a new lease: the master key names the incarnation that is gone
        assert a.view.wait_for(lambda s: s.needs_election(), 2.0)
        assert not a.is_master_writable()
        again = a.elect_master()
        assert again.ok and again.master is not None and again.master.masterEpoch == 2
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0) and a.is_master_writable()
    finally:
        a.stop()


def test_a_replica_outside_the_sync_state_set_is_elected_only_when_unclean(etcd: EtcdClient) -> None:
    a, b, c = started(etcd, 1, 2, 3)
    try:
        assert a.elect_master().ok
        b.report(max_offset=100, epoch=1)
        c.report(max_offset=200, epoch=1)
        a.keeper.stop(revoke=True)
        assert b.elect_master().code == Code.CONTROLLER_ELECT_MASTER_FAILED
        state = b.read_state()
        assert state.master is not None and (state.master.masterBrokerId, state.master_epoch) == (1, 1)
        assert state.needs_election()
        # Unclean: the live replica with the highest (epoch, maxOffset), whoever asks.
        unclean = b.elect_master(unclean=True)
        assert unclean.ok and unclean.master is not None and unclean.sync_state is not None
        assert (unclean.master.masterBrokerId, unclean.master.masterEpoch) == (3, 2)
        assert unclean.sync_state.syncStateSet == frozenset([3])
    finally:
        stop_all(a, b, c)


def test_a_replica_reporting_a_full_disk_is_passed_over_with_all_ack(etcd: EtcdClient) -> None:
    a, b, c = started(etcd, 1, 2, 3, all_ack_in_sync_state_set=True)
    try:
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        assert a.alter_sync_state_set({1, 2, 3}).ok
        assert c.view.wait_for(lambda s: s.in_sync == {1, 2, 3}, 2.0)
        b.report(max_offset=300, epoch=1, disk_full=True)  # ahead, and the lowest brokerId left
        c.report(max_offset=200, epoch=1)
        assert ReplicaInfo.decode(etcd.get(b.keys.replica(2)).value).diskFull
        a.keeper.stop(revoke=True)
        assert c.view.wait_for(lambda s: s.needs_election(), 2.0)
        elected = b.elect_master()  # whoever asks
        assert elected.ok and elected.master is not None and elected.master.masterBrokerId == 3
    finally:
        stop_all(a, b, c)


def test_the_election_loop_replaces_a_master_whose_lease_expired(etcd: EtcdClient) -> None:
    controllers = started(etcd, 1, 2, 3)
    changes: list[tuple[int, int]] = []  # (old masterEpoch, new masterEpoch) seen by replica 1's listener
    controllers[0].view.add_listener(
        lambda old, new: (
            changes.append((old.master_epoch, new.master_epoch)) if old.master_epoch != new.master_epoch else None
        )
    )
    loops = [ElectionLoop(c, interval_s=0.05).start() for c in controllers]
    try:
        a = controllers[0]
        assert a.view.wait_for(lambda s: s.master_alive(), 3.0)
        master_id = a.view.state.master.masterBrokerId
        master = controllers[master_id - 1]
        assert master.view.wait_for(lambda s: s.master_alive(), 2.0)
        assert master.alter_sync_state_set({1, 2, 3}).ok
        others = [c for c in controllers if c is not master]
        assert others[0].view.wait_for(lambda s: len(s.in_sync) == 3, 2.0)
        # The master stops renewing (a hung process): its loop and keeper stop, its lease runs out.
        loops[master_id - 1].stop()
        last_keepalive = master.keeper.schedule.last_sent_s
        master.keeper.stop()
        stopped = time.monotonic()
        assert others[0].view.wait_for(lambda s: s.master_epoch == 2 and s.master_alive(), TTL_MS / 1000 + 3.0)
        elected = time.monotonic()
        print(
            f"\nelection after a master's lease loss ({TTL_MS} ms lease): {elected - stopped:.2f} s after keepalives "
            f"stopped, {elected - last_keepalive:.2f} s after the last keepalive"
        )
        assert elected - last_keepalive < TTL_MS / 1000 + 1.5
        state = others[0].read_state()
        assert state.master is not None and state.master.masterBrokerId != master_id
        assert state.in_sync == frozenset([state.master.masterBrokerId]) and state.sync_state_set_epoch == 3
        assert changes == [(0, 1), (1, 2)]
    finally:
        for loop in loops:
            loop.stop()
        stop_all(*controllers)


def test_racing_election_loops_produce_exactly_one_master(etcd: EtcdClient) -> None:
    controllers = started(etcd, 1, 2, 3)
    loops = [ElectionLoop(c) for c in controllers]
    try:
        assert controllers[0].elect_master().ok
        for round_ in range(5):
            state = controllers[0].read_state()
            master = controllers[state.master.masterBrokerId - 1]
            assert master.view.wait_for(lambda s: s.master_alive(), 2.0)
            assert master.alter_sync_state_set({1, 2, 3}).ok
            epoch = state.master_epoch
            master.keeper.stop(revoke=True)
            assert all(c.view.wait_for(lambda s: s.needs_election(), 2.0) for c in controllers)
            results = race(loops)
            won = [r for r in results if r is not None and r.ok]
            assert len(won) == 1, (round_, results)
            after = controllers[0].read_state()
            assert after.master_epoch == epoch + 1 and after.master_alive()
            # (the stopped master's own loop may register it anew before the others elect: a new
            # incarnation may then win, as a restarted replica may; the election is what matters)
            assert after.master is not None
            assert all(c.view.wait_for(lambda s, m=after.master: s.master == m, 2.0) for c in controllers)
    finally:
        stop_all(*controllers)


def test_an_etcd_leader_kill_does_not_cost_the_master_its_lease(etcd_cluster: EtcdCluster) -> None:
    with EtcdClient(etcd_cluster.endpoints, timeout_s=3.0, attempt_timeout_s=0.5) as etcd:
        a, b = started(etcd, 1, 2)
        loops = [ElectionLoop(c, interval_s=0.05).start() for c in (a, b)]
        try:
            assert a.view.wait_for(lambda s: s.master_alive(), 3.0)
            master_id = a.view.state.master.masterBrokerId
            master = a if master_id == 1 else b
            lease = master.keeper.lease_id
            etcd_cluster.kill_leader()
            killed = time.monotonic()
            writable_gap = 0.0
            last_writable = killed
            while time.monotonic() - killed < 2 * TTL_MS / 1000 + 1.0:
                now = time.monotonic()
                if master.is_master_writable():
                    writable_gap = max(writable_gap, now - last_writable)
                    last_writable = now
                time.sleep(0.02)  # samples writability on the real clock across the election
            print(f"\netcd leader killed: longest stretch the master was not writable: {writable_gap:.2f} s")
            state = master.read_state()
            assert not master.lease_lost() and master.keeper.lease_id == lease
            assert state.master is not None and (state.master.masterBrokerId, state.master_epoch) == (master_id, 1)
            assert state.replicas[master_id].lease == lease and master.is_master_writable()
        finally:
            for loop in loops:
                loop.stop()
            stop_all(a, b)


def test_writability_ends_a_margin_before_the_lease_can_expire(etcd: EtcdClient) -> None:
    clock = ManualClock()
    a = replica(etcd, 1, clock=clock, safety_margin_ms=500)
    try:
        a.register()
        a.view.start()
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        clock.advance_ms(300)
        assert a.keeper.run_once()
        renewed_at = clock.monotonic_s()
        ttl = a.keeper.schedule.ttl_s
        assert a.is_master_writable(renewed_at + ttl - 0.5 - 0.001)
        assert not a.is_master_writable(renewed_at + ttl - 0.5)
        assert not a.is_master_writable(renewed_at + ttl)
    finally:
        a.stop()


def test_a_master_stops_being_writable_before_etcd_deletes_its_membership(etcd: EtcdClient) -> None:
    (a,) = started(etcd, 1)
    try:
        assert a.elect_master().ok
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0) and a.is_master_writable()
        a.keeper.stop()  # keepalives stop; the lease runs out in etcd
        unwritable_at = gone_at = None
        deadline = time.monotonic() + TTL_MS / 1000 + 3.0
        while time.monotonic() < deadline and gone_at is None:
            now = time.monotonic()
            if unwritable_at is None and not a.is_master_writable():
                unwritable_at = now
            if etcd.get(a.keys.replica(1)) is None:
                gone_at = now
            time.sleep(0.01)  # samples, on the real clock, when writability and membership end
        assert unwritable_at is not None and gone_at is not None
        print(f"\nwritability ended {gone_at - unwritable_at:.2f} s before etcd deleted the membership key")
        assert gone_at - unwritable_at >= 0.4
    finally:
        a.stop()
