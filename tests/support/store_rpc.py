"""The store's gRPC server for tests: ``served`` (a real FileStore behind a real server on
127.0.0.1:0, the fixture of tests/store/test_rpc.py and test_auth_config.py; exposed by
tests/store/conftest.py), its ``Served`` handle, ``store_config``, ``message`` (a pb.Message on
``TOPIC``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.store.config import StoreConfig
from services.store.metrics import StoreMetrics
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.waits import wait_until

TOPIC = "TopicTest"
RPC_TIMEOUT_S = 10


@dataclass
class Served:
    store: FileStore
    stub: pb_grpc.StoreStub
    channel: grpc.Channel
    metrics: StoreMetrics

    def put(self, *messages: pb.Message, allow_system_topics: bool = False) -> list[pb.PutResult]:
        response = self.stub.PutMessages(
            pb.PutMessagesRequest(messages=list(messages), allow_system_topics=allow_system_topics),
            timeout=RPC_TIMEOUT_S,
        )
        return list(response.results)

    def get(self, queue_offset: int, queue_id: int = 0, topic: str = TOPIC, **kwargs) -> pb.GetMessagesResponse:
        return self.stub.GetMessages(
            pb.GetMessagesRequest(topic=topic, queue_id=queue_id, queue_offset=queue_offset, **kwargs),
            timeout=RPC_TIMEOUT_S,
        )

    def wait_dispatched(self, max_offset: int, queue_id: int = 0, topic: str = TOPIC) -> None:
        request = pb.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id)
        wait_until(lambda: self.stub.GetQueueOffsets(request, timeout=RPC_TIMEOUT_S).max_offset >= max_offset)


def store_config(tmp_path) -> StoreConfig:
    return StoreConfig(
        store_root=tmp_path / "store",
        commitlog_file_size_bytes=1 << 20,
        consume_queue_units_per_file=1000,
        index_hash_slot_num=1000,
        index_num_max=4000,
    )


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    store = FileStore(store_config(tmp_path))
    store.start()
    metrics = StoreMetrics(store)
    server, port = build_server(store, "127.0.0.1", 0, max_workers=8, metrics=metrics)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(store, pb_grpc.StoreStub(channel), channel, metrics)
    finally:
        channel.close()
        stop_server(server, grace_s=1)
        store.shutdown()


def message(body: bytes, queue_id: int = 0, **properties: str) -> pb.Message:
    return pb.Message(
        topic=TOPIC,
        queue_id=queue_id,
        body=body,
        properties=properties,
        born_timestamp_ms=1_700_000_000_000,
        born_host="10.1.2.3:54321",
    )
