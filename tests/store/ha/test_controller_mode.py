"""Controller mode (etcd_endpoints set): real store servers whose roles follow the group's
elections in a real etcd: first master, slaves following it, the SyncStateSet growing to all,
failover after the master is killed (epoch bumped, the old master rejoining as a slave with
its lone tail cut), and puts refused with HA_NOT_AVAILABLE below min_in_sync_replicas."""

from __future__ import annotations

import signal
import time

import pytest

from services.domain.statuses import NOT_MASTER, PutStatus
from services.store.store import FileStore
from tests.support.filestore import message
from tests.support.replica_group import TTL_MS, in_sync, put, wait_master
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd")


def assert_same_log(a: FileStore, b: FileStore, upto: int) -> None:
    assert a.commitlog.read_bytes(0, upto) == b.commitlog.read_bytes(0, upto)


def test_first_replica_masters_the_others_follow_and_join_the_sync_state_set(group):
    first, *others = group(3)
    first.start()
    wait_master(first)
    assert first.live.replication.epoch_file.last_epoch == 1
    assert put(first.live, 40) is PutStatus.PUT_OK  # a set of one: all-ack waits for nobody
    for replica in others:
        replica.start()
    wait_until(lambda: in_sync(first) == {0, 1, 2}, timeout_s=10)
    assert put(first.live, 40, "after") is PutStatus.PUT_OK  # all-ack: every slave confirmed it
    end = first.live.commitlog.max_offset
    for replica in others:
        assert replica.live.replication.is_slave
        assert replica.live.replication.master_address == first.config.store_host
        assert replica.live.commitlog.max_offset == end  # all-ack: confirmed before the put returned
        assert_same_log(first.live, replica.live, end)
        [refused] = replica.live.put_messages([message()])
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE


def test_failover_elects_a_slave_and_the_old_master_rejoins_truncated(group, monkeypatch):
    a, b = group(2, sync_replicas_timeout_ms=500)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    assert put(a.live, 30) is PutStatus.PUT_OK
    confirmed = a.live.commitlog.max_offset
    # A tail only the master holds: appended, never confirmed (FLUSH_SLAVE_TIMEOUT), then killed
    # before it shrank its SyncStateSet (as when etcd is slow to answer), so b stays electable.
    monkeypatch.setattr(a.mode, "_sync_state_set", lambda: None)
    b.live.replication.connection.halt()  # type: ignore[union-attr]
    [lone] = a.live.put_messages([message(body=b"lone" * 100)])
    assert lone.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert a.live.commitlog.max_offset > confirmed
    killed = time.monotonic()
    a.kill()
    wait_master(b, timeout_s=TTL_MS / 1000 + 5)
    failover_s = time.monotonic() - killed
    assert failover_s < TTL_MS / 1000 + 1.5, failover_s
    assert b.live.replication.epoch_file.last_epoch == 2
    assert b.live.commitlog.max_offset == confirmed
    assert put(b.live, 10, "new") is PutStatus.PUT_OK  # a set of {b}: nothing to wait for
    a.start()  # the old master comes back: a slave of b, its lone tail cut
    wait_until(lambda: in_sync(b) == {0, 1}, timeout_s=10)
    assert a.live.replication.is_slave and a.live.replication.client.truncations == 1
    end = b.live.commitlog.max_offset
    wait_until(lambda: a.live.commitlog.max_offset == end, timeout_s=5)
    assert_same_log(a.live, b.live, end)
    assert a.live.replication.epoch_file.entries(end) == b.live.replication.epoch_file.entries(end)
    print(f"failover (kill to writable new master): {failover_s:.2f} s")


def test_below_min_in_sync_replicas_puts_are_refused_before_writing(group):
    a, b = group(2, min_in_sync_replicas=2)
    a.start()
    wait_master(a)
    [early] = a.live.put_messages([message()])
    assert early.status is PutStatus.HA_NOT_AVAILABLE  # a set of one, two needed
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1} and len(a.mode.tracker.local) == 2, timeout_s=10)
    assert put(a.live, 10) is PutStatus.PUT_OK
    b.stop()
    wait_until(lambda: in_sync(a) == {0} and len(a.mode.tracker.local) == 1, timeout_s=10)
    before = a.live.commitlog.max_offset
    [refused] = a.live.put_messages([message()])
    assert refused.status is PutStatus.HA_NOT_AVAILABLE
    assert a.live.commitlog.max_offset == before  # nothing written


def test_etcd_down_the_master_serves_while_its_lease_holds_then_the_group_recovers(group, etcd_server):
    """etcd unreachable (its only member stopped): no elections, but the master keeps taking
    writes until its lease could have expired, then refuses them (NOT_MASTER, nothing written);
    once etcd is back, the group has a writable master again."""
    a, b = group(2)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    [member] = etcd_server.members
    assert member.process is not None
    member.process.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        served_s = 0.0
        while time.monotonic() - stopped < TTL_MS / 1000 + 2:
            [result] = a.live.put_messages([message(body=b"during")])
            if result.status is not PutStatus.PUT_OK:
                assert result.status is PutStatus.SERVICE_NOT_AVAILABLE and NOT_MASTER in result.error
                break
            served_s = time.monotonic() - stopped
            time.sleep(0.02)  # samples, on the real clock, how long the master serves on
        assert 0.5 <= served_s < TTL_MS / 1000, served_s  # served on, then stopped before the lease could end
        before = a.live.commitlog.max_offset
        [refused] = a.live.put_messages([message(body=b"refused")])
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and a.live.commitlog.max_offset == before
    finally:
        member.process.send_signal(signal.SIGCONT)
    wait_until(
        lambda: any(r.live.replication.is_master and r.mode.writable() for r in (a, b)), timeout_s=TTL_MS / 1000 + 10
    )
    master = a if a.live.replication.is_master else b
    assert put(master.live, 5, "back") is PutStatus.PUT_OK
    print(f"\nwith etcd stopped the master served {served_s:.2f} s of its {TTL_MS / 1000:.0f} s lease")


def test_a_put_waiting_for_its_slave_when_the_lease_ends_is_refused_as_not_master(group, etcd_server, monkeypatch):
    """A put appended while the master was writable, still waiting for its slave when the
    master's lease ran out (etcd stopped: it cannot be renewed): written here, never confirmed as
    a master's write, so NOT_MASTER (the client sends it again elsewhere), not FLUSH_SLAVE_TIMEOUT,
    which a remoting producer takes for stored on the master (found by the test above, which met
    it now and then when its last put waited across the end of the lease)."""
    a, b = group(2, sync_replicas_timeout_ms=TTL_MS + 2_000)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    assert put(a.live, 5) is PutStatus.PUT_OK
    monkeypatch.setattr(a.mode, "_sync_state_set", lambda: None)  # b stays in the set: the put waits for it
    b.live.replication.connection.halt()  # type: ignore[union-attr]
    [member] = etcd_server.members
    assert member.process is not None
    member.process.send_signal(signal.SIGSTOP)
    try:
        before = a.live.commitlog.max_offset
        [result] = a.live.put_messages([message(body=b"waiting")])
        assert a.live.commitlog.max_offset > before  # appended: it was the master when it came
    finally:
        member.process.send_signal(signal.SIGCONT)
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE and NOT_MASTER in result.error, result
