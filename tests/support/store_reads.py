"""What the store holds, read back through its gRPC stub (pyrmq.store.v1) while the store's reput
thread dispatches and indexes just after a put returns: ``stored`` (a queue's messages, waiting
for a count), ``wait_stored`` (by key, waiting for the index) and ``wait_dispatched`` (until a
topic's queues hold a count)."""

from __future__ import annotations

import time

from pyrmq.store.v1 import store_pb2 as pb

from services.broker.config import BrokerConfig


def stored(store_stub, topic, queue_id, offset=0, at_least=0) -> list[pb.Message]:
    """The queue's messages from ``offset``; waits (up to 10 s) until at least ``at_least`` are dispatched,
    since the store's reput thread fills the ConsumeQueue just after a put returns."""
    deadline = time.monotonic() + 10
    while True:
        got = store_stub.GetMessages(
            pb.GetMessagesRequest(topic=topic, queue_id=queue_id, queue_offset=offset), timeout=10
        )
        if len(got.messages) >= at_least or time.monotonic() > deadline:
            return list(got.messages)
        time.sleep(0.02)


def wait_stored(store_stub, topic, key, count=1) -> list[pb.Message]:
    deadline = time.monotonic() + 10
    while True:  # the index is built by the store's reput thread, just after the put returns
        found = store_stub.QueryMessagesByKey(pb.QueryMessagesByKeyRequest(topic=topic, key=key), timeout=10).messages
        if len(found) >= count or time.monotonic() > deadline:
            return list(found)
        time.sleep(0.02)


def wait_dispatched(store_stub, topic: str, count: int) -> None:
    """Until the store's reput thread has put ``count`` messages of the (auto-created) topic into its
    ConsumeQueues: a pop filters what is dispatched when it runs, later arrivals are not yet seen."""
    deadline = time.monotonic() + 10
    while sum(len(stored(store_stub, topic, q)) for q in range(BrokerConfig().auto_create_topic_queue_nums)) < count:
        assert time.monotonic() < deadline, f"{topic}: fewer than {count} messages dispatched"
        time.sleep(0.02)
