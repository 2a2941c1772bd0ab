"""pyrmq's etcd client (services/runtime/etcd/) against real etcd members (tests/support/etcd.py):
reads, writes, compare-and-swap, leases with and without keepalive, watches, and a CAS through
the client after a SIGKILL of the leader of three members."""

from __future__ import annotations

import threading
import time

import pytest

from services.runtime.etcd import Compare, Delete, EtcdError, Event, Get, LeaseNotFound, Put
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.etcd.rpc.streams import LeaseKeeper, Watcher
from tests.support.etcd import EtcdCluster
from tests.support.tcp_proxy import TcpProxy
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd")


def test_put_get_prefix_delete(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        assert etcd.get(b"/g/a") is None
        rev = etcd.put(b"/g/a", b"1")
        etcd.put(b"/g/b", b"2")
        etcd.put(b"/h", b"3")
        kv = etcd.get(b"/g/a")
        assert kv is not None and (kv.value, kv.version, kv.mod_revision, kv.create_revision) == (b"1", 1, rev, rev)
        etcd.put(b"/g/a", b"1b")
        kv = etcd.get(b"/g/a")
        assert kv is not None and (kv.value, kv.version, kv.create_revision) == (b"1b", 2, rev)
        assert [(k.key, k.value) for k in etcd.get_prefix(b"/g/")] == [(b"/g/a", b"1b"), (b"/g/b", b"2")]
        assert etcd.delete(b"/g/a") == 1
        assert etcd.delete(b"/g/a") == 0
        assert etcd.delete(b"/g/", prefix=True) == 1
        assert etcd.get_prefix(b"/g/") == []
        assert etcd.get(b"/h") is not None


def test_compare_and_swap(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        key = b"/group/master"
        # Create only if absent: the first wins, the second sees the winner in its failure Get.
        first = etcd.txn([Compare.version(key, 0)], [Put(key, b"r1")], [Get(key)])
        assert first.succeeded and first.results[0].op == Put(key, b"r1")
        second = etcd.txn([Compare.version(key, 0)], [Put(key, b"r2")], [Get(key)])
        assert not second.succeeded and [kv.value for kv in second.results[0].kvs] == [b"r1"]
        kv = etcd.get(key)
        assert kv is not None
        # On mod_revision: a stale revision fails, the current one succeeds.
        assert not etcd.txn([Compare.mod_revision(key, kv.mod_revision - 1)], [Put(key, b"x")]).succeeded
        moved = etcd.txn([Compare.mod_revision(key, kv.mod_revision)], [Put(key, b"r2"), Put(b"/group/epoch", b"2")])
        assert moved.succeeded and moved.revision > kv.mod_revision
        # On value and create_revision, with a delete in the success branch.
        assert not etcd.txn([Compare.value(key, b"r1")], [Delete(key)]).succeeded
        assert not etcd.txn([Compare.create_revision(key, kv.create_revision + 1)], [Delete(key)]).succeeded
        gone = etcd.txn([Compare.value(key, b"r2"), Compare.create_revision(key, kv.create_revision)], [Delete(key)])
        assert gone.succeeded and gone.results[0].deleted == 1
        assert etcd.get(key) is None and etcd.get(b"/group/epoch") is not None
        # GREATER / NOT_EQUAL on a number.
        assert etcd.txn([Compare.version(b"/group/epoch", 0, "GREATER")], [Get(b"/group/epoch")]).succeeded
        assert not etcd.txn([Compare.value(b"/group/epoch", b"2", "NOT_EQUAL")]).succeeded


def test_lease_expires_without_keepalive_and_lives_with_it(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        lease, ttl = etcd.lease_grant(1)
        assert ttl >= 1
        etcd.put(b"/members/r1", b"alive", lease=lease)
        assert etcd.get(b"/members/r1").lease == lease  # type: ignore[union-attr]
        granted = time.monotonic()
        wait_until(lambda: etcd.get(b"/members/r1") is None, ttl + 3.0, "the lease expired")
        assert time.monotonic() - granted >= ttl - 0.5
        assert etcd.lease_time_to_live(lease) == -1
        with pytest.raises(LeaseNotFound):
            etcd.lease_revoke(lease)

        lost = threading.Event()
        keeper = LeaseKeeper.grant(etcd, 1, on_lost=lost.set).start()
        try:
            etcd.put(b"/members/r2", b"alive", lease=keeper.lease_id)
            time.sleep(3 * keeper.schedule.ttl_s + 0.5)  # the real clock passes the TTL thrice: kept alive
            assert etcd.get(b"/members/r2") is not None
            assert keeper.held() and not lost.is_set()
            assert etcd.lease_time_to_live(keeper.lease_id) >= 0  # whole seconds left; -1: expired
        finally:
            keeper.stop(revoke=True)
        assert etcd.get(b"/members/r2") is None and not keeper.held()


def test_keeper_reports_a_revoked_lease_lost(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        lost = threading.Event()
        keeper = LeaseKeeper.grant(etcd, 2, on_lost=lost.set)
        assert keeper.run_once() and keeper.held()
        etcd.lease_revoke(keeper.lease_id)
        assert not keeper.run_once()
        assert lost.is_set() and not keeper.held()


def test_watch_sees_puts_and_deletes_in_order(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        seen: list[Event] = []
        done = threading.Event()

        def on_events(events: list[Event]) -> None:
            seen.extend(events)
            if len(seen) >= 5:
                done.set()

        etcd.put(b"/w/before", b"0")  # before the watch: not seen
        with Watcher(etcd, b"/w/", on_events, prefix=True):
            etcd.put(b"/w/a", b"1")
            etcd.put(b"/other", b"x")  # outside the prefix
            etcd.put(b"/w/b", b"2")
            etcd.put(b"/w/a", b"3")
            etcd.delete(b"/w/b")
            etcd.delete(b"/w/", prefix=True)
            assert done.wait(5.0)
        got = [(e.type, e.kv.key, e.kv.value) for e in seen]
        assert got[:5] == [
            ("PUT", b"/w/a", b"1"),
            ("PUT", b"/w/b", b"2"),
            ("PUT", b"/w/a", b"3"),
            ("DELETE", b"/w/b", b""),
            ("DELETE", b"/w/a", b""),
        ]
        # /w/before was deleted in the same revision as /w/a; nothing after the stop.
        revisions = [e.kv.mod_revision for e in seen]
        assert revisions == sorted(revisions)
        count = len(seen)
        etcd.put(b"/w/late", b"4")
        time.sleep(0.2)  # a while for a late event to (wrongly) arrive: nothing to wait on
        assert len(seen) == count


def test_watch_of_a_compacted_revision_reports_an_error(etcd_server: EtcdCluster) -> None:
    with etcd_server.client() as etcd:
        first = etcd.put(b"/c", b"1")
        etcd.put(b"/c", b"2")
        etcd.compact(etcd.put(b"/c", b"3"))
        errors: list[Exception] = []
        # etcd creates the watch, then cancels it with the compaction revision.
        watcher = Watcher(etcd, b"/c", lambda events: None, start_revision=first, on_error=errors.append).start()
        try:
            wait_until(lambda: errors, 5.0, "the watch error")
        finally:
            watcher.stop()
        assert isinstance(errors[0], EtcdError) and f"revision {first} compacted" in str(errors[0])
        assert watcher.error is errors[0] and len(errors) == 1


def test_cas_succeeds_soon_after_the_leader_is_killed(etcd_cluster: EtcdCluster) -> None:
    with etcd_cluster.client(timeout_s=5.0, attempt_timeout_s=1.0) as etcd:
        key = b"/group/epoch"
        etcd.put(key, b"1")
        seen: list[Event] = []
        watcher = Watcher(etcd, key, seen.extend).start()
        lost = threading.Event()
        keeper = LeaseKeeper.grant(etcd, 2, on_lost=lost.set).start()
        leader = etcd_cluster.wait_leader(5.0)
        etcd.rotation.answered(leader)  # the client's next call goes to the leader first
        try:
            etcd_cluster.kill(leader)
            killed = time.monotonic()
            kv = etcd.get(key)
            assert kv is not None
            result = etcd.txn([Compare.mod_revision(key, kv.mod_revision)], [Put(key, b"2")])
            elapsed = time.monotonic() - killed
            assert result.succeeded, result
            assert elapsed < 3.0, f"CAS took {elapsed:.2f} s after the leader kill"
            assert etcd.rotation.current != leader
            # The watch moved to a survivor and resumed where it was: the CAS is seen once.
            wait_until(lambda: [e.kv.value for e in seen] == [b"2"], 5.0, "the CAS seen once", describe=lambda: seen)
            # The lease survived the election.
            time.sleep(2.5)  # past the lease's 2 s TTL on the real clock: renewed through the new leader
            assert keeper.held() and not lost.is_set()
        finally:
            keeper.stop(revoke=True)
            watcher.stop()


def test_a_watch_moves_on_when_its_member_goes_silent(etcd_server: EtcdCluster) -> None:
    """A member cut off from the client sends no event and no error: the watch asks for
    progress, hears nothing for PROGRESS_SILENCE_S, and is made again on the next endpoint
    (found by the netns faults: no election while one etcd member was cut from the group)."""
    [real] = etcd_server.endpoints
    with TcpProxy(real) as silent, EtcdClient([silent.address, real], timeout_s=3.0) as etcd:
        seen: list[Event] = []
        with Watcher(etcd, b"/silent", seen.extend):
            silent.delay_ms = 600_000  # holds every byte: the connection stays open and says nothing
            with etcd_server.client() as writer:
                writer.put(b"/silent", b"1")
            wait_until(lambda: [e.kv.value for e in seen] == [b"1"], 8.0, "the put seen through the other endpoint")
