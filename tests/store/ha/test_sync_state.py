"""The master grows and shrinks its SyncStateSet as RocketMQ's AutoSwitchHAService does
(services/store/ha/sync_state.py), through etcd: a slave joins once it has the confirm offset
and the master's epoch, leaves after haMaxTimeSlaveNotCatchup without catching up, and a
replica that is not the writable master asks for nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.coordination.group_state import ControllerCode
from services.runtime.clock import ManualClock
from services.runtime.etcd.rpc.client import EtcdClient
from services.store.ha.controller import ReplicaController
from services.store.ha.sync_state import SyncStateSetLoop, SyncStateSetTracker
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.needs("etcd")

NOT_CATCHUP_MS = 15_000


@pytest.fixture
def etcd(etcd_server: EtcdCluster) -> Iterator[EtcdClient]:
    with EtcdClient(etcd_server.endpoints, timeout_s=3.0, attempt_timeout_s=0.5) as client:
        yield client


def registered(etcd: EtcdClient, group: str, clock: ManualClock, lease_ttl_ms: int) -> list[ReplicaController]:
    """Replicas 1, 2 and 3 of ``group``, registered (no keeper thread renews their leases) and
    their views watched."""
    replicas = [ReplicaController(group, i, f"h:{i}", etcd, clock, lease_ttl_ms) for i in (1, 2, 3)]
    for r in replicas:
        r.register()
        r.view.start()
    return replicas


def test_the_master_grows_and_shrinks_the_set_through_etcd(etcd: EtcdClient) -> None:
    clock = ManualClock()
    a, b, c = registered(etcd, "g", clock, 2000)
    try:
        elected = a.elect_master()
        assert elected.ok and elected.sync_state is not None
        assert a.view.wait_for(lambda s: s.master_alive(), 2.0)
        tracker = SyncStateSetTracker(1, clock, NOT_CATCHUP_MS)
        tracker.reset(elected.sync_state, epoch_start_offset=1000)
        loop = SyncStateSetLoop(a, tracker)
        # Behind the confirm offset, or only on an old epoch's bytes: not in sync.
        assert loop.offer(2, slave_max_offset=1500, confirm_offset=2000) is None
        assert loop.offer(2, slave_max_offset=900, confirm_offset=800) is None
        tracker.caught_up(2)
        grown = loop.offer(2, slave_max_offset=2000, confirm_offset=2000)
        assert grown is not None and grown.ok and grown.sync_state is not None
        assert (grown.sync_state.syncStateSet, grown.sync_state.syncStateSetEpoch) == (frozenset([1, 2]), 2)
        assert tracker.effective() == frozenset([1, 2])
        tracker.caught_up(3)
        assert loop.offer(3, 2100, 2100).sync_state.syncStateSetEpoch == 3  # type: ignore[union-attr]
        # Slave 3 keeps catching up, slave 2 stops: after haMaxTimeSlaveNotCatchup, 2 leaves.
        clock.advance_ms(NOT_CATCHUP_MS)
        tracker.caught_up(3)
        a.keeper.run_once()
        assert loop.run_once() is None
        clock.advance_ms(1)
        a.keeper.run_once()
        shrunk = loop.run_once()
        assert shrunk is not None and shrunk.ok and shrunk.sync_state is not None
        assert (shrunk.sync_state.syncStateSet, shrunk.sync_state.syncStateSetEpoch) == (frozenset([1, 3]), 4)
        # A disconnected slave leaves at once.
        tracker.disconnected(3)
        assert loop.run_once().sync_state.syncStateSet == frozenset([1])  # type: ignore[union-attr]
        state = a.read_state()
        assert (state.in_sync, state.sync_state_set_epoch, state.master_epoch) == (frozenset([1]), 5, 1)
        # A slave's loop asks for nothing: it is not the writable master.
        b_tracker = SyncStateSetTracker(2, clock, NOT_CATCHUP_MS)
        b_tracker.caught_up(3)
        assert SyncStateSetLoop(b, b_tracker).offer(3, 5000, 0) is None
        assert b.alter_sync_state_set({1, 2}).code == ControllerCode.CONTROLLER_INVALID_MASTER
    finally:
        for r in (a, b, c):
            r.stop()


def test_a_slave_whose_lease_is_gone_leaves_the_set_at_once(etcd: EtcdClient) -> None:
    """A paused or partitioned slave stops holding up SYNC puts when its lease expires, not
    haMaxTimeSlaveNotCatchup later (found by chaos: a paused slave stalled every send 15 s)."""
    clock = ManualClock()
    a, b, c = registered(etcd, "g2", clock, 10_000)
    try:
        elected = a.elect_master()
        assert elected.ok and elected.sync_state is not None
        assert a.view.wait_for(lambda s: s.master_alive() and len(s.replicas) == 3, 2.0)
        tracker = SyncStateSetTracker(1, clock, NOT_CATCHUP_MS)
        tracker.reset(elected.sync_state, epoch_start_offset=0)
        loop = SyncStateSetLoop(a, tracker)
        for slave in (2, 3):
            tracker.caught_up(slave)
            assert loop.offer(slave, 100, 100) is not None
        assert tracker.effective() == frozenset([1, 2, 3])
        assert loop.run_once() is None  # both caught up and registered
        b.stop(revoke=True)  # its membership key goes, as when its lease expires
        assert a.view.wait_for(lambda s: 2 not in s.replicas, 5.0)
        tracker.caught_up(2)  # even a slave that acked a moment ago
        tracker.caught_up(3)
        shrunk = loop.run_once()
        assert shrunk is not None and shrunk.ok and shrunk.sync_state is not None
        assert shrunk.sync_state.syncStateSet == frozenset([1, 3])
    finally:
        for r in (a, c):
            r.stop()
