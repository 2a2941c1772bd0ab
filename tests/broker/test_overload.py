"""Overload (docs/durability.md, T1.12 in small): with the store slower than the offered load,
excess sends are refused fast with TOO_MANY_REQUESTS, never time out, and none of the refused
messages is stored; once the store is fast again every send succeeds. Both places a send can
wait are covered: the broker's send queue (PutCoalescer) and gRPC's worker pool (rpc/pool.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.__main__ import build_broker
from services.broker.config import BrokerConfig
from services.broker.v2.pool import TimedThreadPool
from services.runtime.clock import ManualClock
from services.store.client.client import GrpcStoreClient
from tests.support.topics import create_topics
from tests.support.v2_requests import message, send
from tests.support.waits import wait_until

SENDERS = 48
SLOW_PUT_S = 0.4


class SlowStore(GrpcStoreClient):
    """The real store, behind puts that take SLOW_PUT_S while ``slow`` is set (a slow disk)."""

    slow = threading.Event()

    def put_messages(self, messages, allow_system_topics, timeout_s=None):
        if self.slow.is_set():
            time.sleep(SLOW_PUT_S)  # a slow disk: each put takes this long
        return super().put_messages(messages, allow_system_topics)


def stored_keys(store_stub, expected: set[str]) -> set[str]:
    """The KEYS of the messages stored in Overload, once ``expected`` are all there (the store's
    reput thread dispatches just after a put returns)."""

    def keys() -> set[str]:
        found = set()
        for queue_id in range(8):
            request = pb.GetMessagesRequest(topic="Overload", queue_id=queue_id, queue_offset=0, max_count=1000)
            found |= {m.properties.get("KEYS") for m in store_stub.GetMessages(request, timeout=10).messages}
        return found

    return wait_until(keys, 10, "the accepted sends stored", accept=lambda found: expected <= found)


def overload(config: BrokerConfig, store_address: str, store_stub, senders: int) -> tuple[list, object]:
    """Send ``senders`` messages at once against a slow store; check refusals are fast, definite
    and unstored, and that sends succeed again after; (results, broker servicer)."""
    store = SlowStore(store_address)
    create_topics(store, "Overload")
    broker = build_broker(config, store)
    broker.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            v2 = s_grpc.MessagingServiceStub(channel)
            assert send(v2, message("Overload", body=b"warm-up", keys=["warm"])).status.code == d.OK
            SlowStore.slow.set()

            def one(i: int) -> tuple[int, float]:
                started = time.monotonic()
                response = send(
                    v2,
                    message(
                        "Overload",
                        body=f"m{i}".encode(),
                        keys=[f"k{i}"],
                        message_id=f"0102FC0000000146A20B13E206{i:08X}",
                    ),
                )
                return response.status.code, time.monotonic() - started

            with ThreadPoolExecutor(senders) as pool:
                results = list(pool.map(one, range(senders)))
            SlowStore.slow.clear()
            codes = [code for code, _ in results]
            ok = [i for i, (code, _) in enumerate(results) if code == d.OK]
            refused = [(i, s) for i, (code, s) in enumerate(results) if code == d.TOO_MANY_REQUESTS]
            assert set(codes) <= {d.OK, d.TOO_MANY_REQUESTS}, codes  # no timeouts, no other errors
            assert refused, "the store was slower than the load: some sends must be refused"
            # A refusal comes within the queue-wait limit plus one slow put, far below the 3 s send timeout.
            assert max(s for _, s in refused) < 200 / 1000 + 2 * SLOW_PUT_S + 0.5, refused
            # Every OK is stored; no refused message is.
            expected = {"warm"} | {f"k{i}" for i in ok}
            assert stored_keys(store_stub, expected) == expected
            # Recovered: with the store fast again, sends succeed.
            assert all(
                send(v2, message("Overload", body=b"after", keys=["after"])).status.code == d.OK for _ in range(5)
            )
            return results, broker.servicer
    finally:
        SlowStore.slow.clear()
        broker.stop(1.0)
        store.close()


def test_excess_sends_are_refused_fast_and_definitely(store_address: str, store_stub) -> None:
    overload(
        BrokerConfig(port=0, store_address=store_address, put_queue_wait_max_ms=200), store_address, store_stub, SENDERS
    )


def test_sends_waiting_for_a_grpc_worker_are_refused_before_any_work(store_address: str, store_stub) -> None:
    # Four workers, each held by a slow put: the other sends wait in gRPC's pool, not in the
    # broker's send queue, and are refused as soon as a worker picks them up.
    config = BrokerConfig(
        port=0,
        store_address=store_address,
        put_queue_wait_max_ms=200,
        grpc_workers_max=4,
        telemetry_streams_max=2,
        put_coalescing_enable=False,
    )
    results, servicer = overload(config, store_address, store_stub, 24)
    refused = sum(1 for code, _ in results if code == d.TOO_MANY_REQUESTS)
    assert servicer.shed == refused > 0


def test_calls_past_the_connection_cap_are_refused_at_once_and_not_processed(store_address: str, store_stub) -> None:
    store = SlowStore(store_address)
    create_topics(store, "Overload")
    broker = build_broker(BrokerConfig(port=0, store_address=store_address, grpc_max_concurrent_streams=4), store)
    broker.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            v2 = s_grpc.MessagingServiceStub(channel)
            assert send(v2, message("Overload", body=b"warm-up", keys=["warm"])).status.code == d.OK
            SlowStore.slow.set()
            calls = [
                (
                    i,
                    time.monotonic(),
                    v2.SendMessage.future(
                        s.SendMessageRequest(
                            messages=[
                                message(
                                    "Overload",
                                    body=f"m{i}".encode(),
                                    keys=[f"k{i}"],
                                    message_id=f"0102FC0000000146A20B13E207{i:08X}",
                                )
                            ]
                        ),
                        metadata=(("x-mq-client-id", "overload@1"),),
                        timeout=10,
                    ),
                )
                for i in range(16)
            ]
            ok, refused = [], []
            for i, _sent, call in calls:
                try:
                    assert call.result().status.code in (d.OK, d.TOO_MANY_REQUESTS)
                    if call.result().status.code == d.OK:
                        ok.append(i)
                except grpc.RpcError as exc:
                    assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc
                    refused.append(i)
            SlowStore.slow.clear()
            assert refused and ok
            # Not processed: exactly the OK sends are stored.
            expected = {"warm"} | {f"k{i}" for i in ok}
            assert stored_keys(store_stub, expected) == expected
            assert send(v2, message("Overload", body=b"after", keys=["after"])).status.code == d.OK
    finally:
        SlowStore.slow.clear()
        broker.stop(1.0)
        store.close()


def test_timed_pool_reports_each_calls_wait_for_a_worker() -> None:
    clock = ManualClock()
    pool = TimedThreadPool(1, "timed", clock.monotonic_s)
    release = threading.Event()
    first = pool.submit(lambda: (release.wait(5), pool.waited_s())[1])
    second = pool.submit(pool.waited_s)  # queued behind the first
    clock.advance_ms(250)
    release.set()
    assert first.result(5) == 0.0
    assert second.result(5) == 0.25
    assert pool.waited_s() == 0.0  # off the pool
    pool.shutdown()
