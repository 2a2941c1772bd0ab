"""What the store holds, read back through its gRPC stub (pyrmq.store.v1) while the store's reput
thread dispatches and indexes just after a put returns: ``stored`` (a queue's messages, waiting
for a count), ``wait_stored`` (by key, waiting for the index) and ``wait_dispatched`` (until a
topic's queues hold a count)."""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from services.broker.config import BrokerConfig
from tests.support.waits import wait_until


def stored(store_stub, topic, queue_id, offset=0, at_least=0) -> list[pb.Message]:
    """The queue's messages from ``offset``; waits (up to 10 s) until at least ``at_least`` are dispatched,
    since the store's reput thread fills the ConsumeQueue just after a put returns."""

    request = pb.GetMessagesRequest(topic=topic, queue_id=queue_id, queue_offset=offset)
    return wait_until(
        lambda: list(store_stub.GetMessages(request, timeout=10).messages),
        10,
        f"{at_least} messages in {topic} queue {queue_id}",
        accept=lambda messages: len(messages) >= at_least,
    )


def wait_stored(store_stub, topic, key, count=1) -> list[pb.Message]:
    """The messages of ``topic`` with ``key``, once at least ``count`` are indexed (the index is
    built by the store's reput thread, just after the put returns)."""

    request = pb.QueryMessagesByKeyRequest(topic=topic, key=key)
    return wait_until(
        lambda: list(store_stub.QueryMessagesByKey(request, timeout=10).messages),
        10,
        f"{count} messages with key {key} in {topic}",
        accept=lambda messages: len(messages) >= count,
    )


def wait_dispatched(store_stub, topic: str, count: int) -> None:
    """Until the store's reput thread has put ``count`` messages of the (auto-created) topic into its
    ConsumeQueues: a pop filters what is dispatched when it runs, later arrivals are not yet seen."""
    queues = range(BrokerConfig().auto_create_topic_queue_nums)
    wait_until(
        lambda: sum(len(stored(store_stub, topic, q)) for q in queues) >= count,
        10,
        f"{topic}: {count} messages dispatched",
    )
