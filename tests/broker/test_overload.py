"""Overload (reliability.md §5, T1.12 in small): with the store slower than the offered load,
excess sends are refused fast with TOO_MANY_REQUESTS, never time out, and none of the refused
messages is stored; once the store is fast again every send succeeds."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.config import BrokerConfig
from services.broker.rpc.grpc_store_client import GrpcStoreClient
from services.broker.rpc.server import build_server
from tests.broker.test_rpc import message, send

SENDERS = 48
SLOW_PUT_S = 0.4


class SlowStore(GrpcStoreClient):
    """The real store, behind puts that take SLOW_PUT_S while ``slow`` is set (a slow disk)."""

    slow = threading.Event()

    def put_messages(self, messages, allow_system_topics):  # noqa: ANN001, ANN201
        if self.slow.is_set():
            time.sleep(SLOW_PUT_S)
        return super().put_messages(messages, allow_system_topics)


def test_excess_sends_are_refused_fast_and_definitely(store_address: str, store_stub) -> None:
    store = SlowStore(store_address)
    broker = build_server(BrokerConfig(port=0, store_address=store_address, put_queue_wait_max_ms=200), store)
    broker.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            v2 = s_grpc.MessagingServiceStub(channel)
            assert send(v2, message("Overload", body=b"warm-up", keys=["warm"])).status.code == d.OK
            SlowStore.slow.set()

            def one(i: int) -> tuple[int, float]:
                started = time.monotonic()
                response = send(v2, message("Overload", body=f"m{i}".encode(), keys=[f"k{i}"],
                                            message_id=f"0102FC0000000146A20B13E206{i:08X}"))
                return response.status.code, time.monotonic() - started

            with ThreadPoolExecutor(SENDERS) as pool:
                results = list(pool.map(one, range(SENDERS)))
            SlowStore.slow.clear()
            codes = [code for code, _ in results]
            ok = [i for i, (code, _) in enumerate(results) if code == d.OK]
            refused = [(i, s) for i, (code, s) in enumerate(results) if code == d.TOO_MANY_REQUESTS]
            assert set(codes) <= {d.OK, d.TOO_MANY_REQUESTS}, codes        # no timeouts, no other errors
            assert refused, "the store was slower than the load: some sends must be refused"
            # A refusal comes within the queue-wait limit plus one slow put, far below the 3 s send timeout.
            assert max(s for _, s in refused) < 200 / 1000 + 2 * SLOW_PUT_S + 0.5, refused
            # Every OK is stored; no refused message is.
            time.sleep(0.5)  # the store's reput thread dispatches just after a put returns
            keys = set()
            for queue_id in range(8):
                keys |= {m.properties.get("KEYS") for m in store_stub.GetMessages(
                    pb.GetMessagesRequest(topic="Overload", queue_id=queue_id, queue_offset=0, max_count=1000),
                    timeout=10).messages}
            assert keys == {"warm"} | {f"k{i}" for i in ok}
            # Recovered: with the store fast again, sends succeed.
            assert all(send(v2, message("Overload", body=b"after", keys=["after"])).status.code == d.OK
                       for _ in range(5))
    finally:
        SlowStore.slow.clear()
        broker.stop(1.0)
        store.close()
