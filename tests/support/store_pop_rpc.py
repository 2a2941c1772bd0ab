"""The store's pop RPCs for tests: ``served`` (a ManualClock-driven FileStore behind a real gRPC
server on 127.0.0.1:0, revive driven by hand), its ``Served`` handle (put, pop, ack, change,
revive), ``message`` (a pb.Message on ``TOPIC``) and the topic/group names. Used by
tests/store/test_pop_rpc.py and test_pop_sql.py.

The fixture is named ``served`` like the one of tests/support/store_rpc.py (which
tests/store/conftest.py exposes); these modules import it as ``pop_served``, so their own
module-level ``served`` overrides the directory's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.runtime.clock import ManualClock
from services.store.metadata.config_files import TopicConfig
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.store_rpc import store_config

TOPIC = "TopicPopRpc"
GROUP = "GroupPopRpc"
RETRY = "%RETRY%" + GROUP + "_" + TOPIC  # the pop retry topic of (GROUP, TOPIC)
DLQ = "%DLQ%" + GROUP
INVISIBLE_MS = 30_000
RPC_TIMEOUT_S = 10


@dataclass
class Served:
    store: FileStore
    stub: pb_grpc.StoreStub
    clock: ManualClock

    def put(self, *messages: pb.Message) -> None:
        results = self.stub.PutMessages(pb.PutMessagesRequest(messages=list(messages)), timeout=RPC_TIMEOUT_S).results
        assert all(r.status == pb.PUT_OK for r in results)
        self.store.reput.run_once()

    def pop(self, group: str = GROUP, topic: str = TOPIC, **kwargs) -> pb.PopMessagesResponse:
        kwargs.setdefault("queue_id", -1)
        kwargs.setdefault("invisible_duration_ms", INVISIBLE_MS)
        return self.stub.PopMessages(pb.PopMessagesRequest(group=group, topic=topic, **kwargs), timeout=RPC_TIMEOUT_S)

    def ack(self, handle: str, group: str = GROUP, topic: str = TOPIC) -> int:
        request = pb.AckMessageRequest(group=group, topic=topic, receipt_handle=handle)
        return self.stub.AckMessage(request, timeout=RPC_TIMEOUT_S).status

    def change(self, handle: str, invisible_ms: int) -> pb.ChangeInvisibleDurationResponse:
        request = pb.ChangeInvisibleDurationRequest(
            group=GROUP, topic=TOPIC, receipt_handle=handle, invisible_duration_ms=invisible_ms
        )
        return self.stub.ChangeInvisibleDuration(request, timeout=RPC_TIMEOUT_S)

    def revive(self) -> None:
        self.store.pop.revive.run_once()
        self.store.reput.run_once()


@pytest.fixture(name="served")
def pop_served(tmp_path) -> Iterator[Served]:
    clock = ManualClock()
    store = FileStore(store_config(tmp_path), clock)
    store.start()
    store.pop.revive.halt()  # driven by hand
    store.topics.create_or_update(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
    server, port = build_server(store, "127.0.0.1", 0, max_workers=4)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(store, pb_grpc.StoreStub(channel), clock)
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
