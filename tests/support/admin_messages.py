"""Messages for the admin tests (the core, its RPCs, cluster status and the CLI): ``put`` one
message through the store's gRPC stub with a UNIQ_KEY (and KEYS), and ``wait_indexed`` until
the store's reput thread has indexed it."""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from tests.support.waits import wait_until


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
    request = pb.QueryMessagesByKeyRequest(topic=topic, key=key)
    wait_until(
        lambda: len(store_stub.QueryMessagesByKey(request, timeout=10).messages) >= count,
        10,
        f"{key} indexed in {topic}",
    )
