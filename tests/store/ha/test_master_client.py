"""The store client that follows its group's master through etcd (client/master.py): calls
reach whichever replica is master, a put a failover interrupted is retried on the new master
within the failover timeout, and every put answered OK is on the new master afterwards."""

from __future__ import annotations

import threading
import time

import pytest

from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreError
from services.store.client.master import MasterTransport
from services.store.client.model import MessageToPut, PutStatus
from tests.support.etcd import EtcdCluster
from tests.support.replica_group import TTL_MS, in_sync, wait_master
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd")


def client_of(etcd: EtcdCluster, failover_timeout_s: float = 10.0) -> GrpcStoreClient:
    return GrpcStoreClient(
        "", etcd_endpoints=",".join(etcd.endpoints), group="broker-a", failover_timeout_s=failover_timeout_s
    )


def body(i: int) -> bytes:
    return f"follow-{i:05d}-".encode() * 20


def test_calls_reach_the_master_and_follow_it_through_a_failover(group, etcd_server):
    a, b = group(2)
    a.start()
    wait_master(a)
    b.start()
    wait_until(lambda: in_sync(a) == {0, 1}, timeout_s=10)
    client = client_of(etcd_server)
    transport = client.transport
    assert isinstance(transport, MasterTransport)
    try:
        assert client.wait_ready(5, give_up=lambda: False)
        assert client.address == a.config.store_host
        acked: list[tuple[int, int]] = []  # (i, phy_offset) answered PUT_OK
        failed: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    [outcome] = client.put_messages([MessageToPut("TopicTest", i % 4, body(i), {"KEYS": f"k{i}"})])
                except StoreError as exc:
                    failed.append(str(exc))
                else:
                    if outcome.status is PutStatus.PUT_OK:
                        acked.append((i, outcome.phy_offset))
                    else:
                        failed.append(outcome.status.name)
                i += 1

        producer = threading.Thread(target=produce)
        producer.start()
        wait_until(lambda: len(acked) >= 50, timeout_s=10)
        killed = time.monotonic()
        before = len(acked)
        a.kill()
        wait_until(lambda: len(acked) >= before + 50, timeout_s=TTL_MS / 1000 + 10)
        stop.set()
        producer.join(10)
        recovered_s = time.monotonic() - killed
        assert failed == []  # every put a failover interrupted was retried on the new master
        assert b.live.replication.is_master and client.address == b.config.store_host
        assert transport.failovers >= 1
        for i, phy_offset in acked:  # all-ack: every OK put is on the new master, where it said
            stored = b.live.look_message_by_phy_offset(phy_offset)
            assert stored is not None and stored.body == body(i), i
        assert client.query_consumer_offset("nobody", "TopicTest", 0) in (-1, 0)  # reads reach it too
        print(f"kill -> 50 more OK puts through the new master: {recovered_s:.2f} s")
    finally:
        client.close()


def test_no_master_until_one_is_elected(group, etcd_server):
    [a] = group(1)
    client = client_of(etcd_server, failover_timeout_s=0.5)
    try:
        with pytest.raises(StoreError, match="no master"):
            client.put_messages([MessageToPut("TopicTest", 0, b"early", {})])
        a.start()
        wait_master(a)
        assert client.wait_ready(5, give_up=lambda: False)
        [outcome] = client.put_messages([MessageToPut("TopicTest", 0, b"later", {})])
        assert outcome.status is PutStatus.PUT_OK
    finally:
        client.close()
