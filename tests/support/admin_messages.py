"""Messages for the admin tests (the core, its RPCs, cluster status and the CLI): ``put`` one
message through the store's gRPC stub with a UNIQ_KEY (and KEYS), and ``wait_indexed`` until
the store's reput thread has indexed it."""

from __future__ import annotations

import time

from pyrmq.store.v1 import store_pb2 as pb


def put(store_stub, topic: str, queue_id: int, uniq_key: str, keys: str = "", body: bytes = b"hello") -> pb.PutResult:
    properties = {"UNIQ_KEY": uniq_key, "TAGS": "TagA"}
    if keys:
        properties["KEYS"] = keys
    [result] = store_stub.PutMessages(
        pb.PutMessagesRequest(messages=[pb.Message(topic=topic, queue_id=queue_id, body=body, properties=properties)]),
        timeout=10,
    ).results
    assert result.status == pb.PUT_OK, result.error
    return result


def wait_indexed(store_stub, topic: str, key: str, count: int = 1) -> None:
    """The store's reput thread builds the index just after a put returns."""
    deadline = time.monotonic() + 10
    while (
        len(store_stub.QueryMessagesByKey(pb.QueryMessagesByKeyRequest(topic=topic, key=key), timeout=10).messages)
        < count
    ):
        assert time.monotonic() < deadline, f"{key} not indexed in {topic}"
        time.sleep(0.02)
