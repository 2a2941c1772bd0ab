"""Queues filled for the offset and pull tests: ``put`` writes ``count`` messages into one queue
through the store's gRPC stub (tags in turn, KEYS ``k<n> x``, UNIQ_KEY ``ID<nnnn>``) and waits
until they are dispatched."""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from tests.support.store_reads import stored


def put(store_stub, topic, queue_id, count, tags=("TagA",), start=0):
    messages = [
        pb.Message(
            topic=topic,
            queue_id=queue_id,
            body=b"m%d" % (start + i),
            properties={
                "TAGS": tags[i % len(tags)],
                "KEYS": f"k{start + i} x",
                "UNIQ_KEY": f"ID{start + i:04d}",
                "color": "red",
            },
        )
        for i in range(count)
    ]
    results = store_stub.PutMessages(pb.PutMessagesRequest(messages=messages), timeout=10).results
    assert all(r.status == pb.PUT_OK for r in results)
    stored(store_stub, topic, queue_id, 0, at_least=start + count)
    return results
