"""Broker test fixtures: an in-memory store double for the core, real servers for the rest.

* ``FakeStore`` implements ``StoreClient`` in memory (topics, groups, put outcomes with
  per-queue offsets) and records every PutMessages call; core tests use it.
* ``store_address``: a real FileStore behind the store's gRPC server on 127.0.0.1:0.
* ``make_broker(**config)``: a real broker server (GrpcStoreClient -> that store) on
  127.0.0.1:0; ``v2(broker)`` is a MessagingService stub that sends x-mq-client-id.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.broker.config import BrokerConfig
from services.broker.metrics import BrokerMetrics
from services.broker.model import GroupInfo, PutOutcome, PutStatus, StoredMessage, StoreMessage, TopicInfo
from services.broker.rpc.grpc_store_client import GrpcStoreClient
from services.broker.rpc.server import BrokerServer, build_server
from services.store.clock import SystemClock
from services.store.rpc.server import build_server as build_store_server
from services.store.rpc.server import stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config

CLIENT_ID = "test-host@1@0@broker-tests"
METADATA = (("x-mq-client-id", CLIENT_ID),)


@dataclass
class FakeStore:
    """A StoreClient in memory. ``outcome`` may override the status of every put."""

    topics: dict[str, TopicInfo] = field(default_factory=dict)
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    calls: list[tuple[list[StoreMessage], bool]] = field(default_factory=list)
    outcome: Callable[[StoreMessage], PutStatus] | None = None
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    records: dict[int, StoredMessage] = field(default_factory=dict)  # phy offset -> record
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put_messages(self, messages: list[StoreMessage], allow_system_topics: bool) -> list[PutOutcome]:
        with self.lock:
            self.calls.append((list(messages), allow_system_topics))
            results = []
            for message in messages:
                status = self.outcome(message) if self.outcome else PutStatus.PUT_OK
                if status is not PutStatus.PUT_OK:
                    results.append(PutOutcome(status, error=f"fake {status.name}"))
                    continue
                key = (message.topic, message.queue_id)
                offset = self.next_offsets.get(key, 0)
                self.next_offsets[key] = offset + 1
                phy_offset = 1000 * (len(self.records) + 1)
                self.records[phy_offset] = StoredMessage(
                    topic=message.topic, queue_id=message.queue_id, body=message.body,
                    properties=dict(message.properties), queue_offset=offset, phy_offset=phy_offset,
                    sys_flag=message.sys_flag, born_timestamp_ms=message.born_timestamp_ms,
                    born_host=message.born_host, reconsume_times=message.reconsume_times,
                    prepared_transaction_offset=message.prepared_transaction_offset)
                results.append(PutOutcome(PutStatus.PUT_OK, queue_offset=offset, phy_offset=phy_offset))
            return results

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        return self.records.get(phy_offset)

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        return [r for r in self.records.values() if r.topic == topic and (
            r.properties.get("UNIQ_KEY") == key or key in r.properties.get("KEYS", "").split(" "))][:max_num]

    def get_topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def create_topic(self, topic: TopicInfo) -> TopicInfo:
        self.topics[topic.name] = topic
        return topic

    def get_group(self, name: str) -> GroupInfo | None:
        return self.groups.get(name)

    def close(self) -> None:
        pass

    @property
    def put_messages_sent(self) -> list[StoreMessage]:
        return [m for batch, _ in self.calls for m in batch]


@pytest.fixture
def fake_store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def store_address(tmp_path: Path) -> Iterator[str]:
    store = FileStore(small_config(tmp_path / "store", commitlog_file_size_bytes=64 << 20), SystemClock())
    store.start()
    server, port = build_store_server(store, "127.0.0.1", 0)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_server(server, 1.0)
        store.shutdown()


@pytest.fixture
def store_stub(store_address: str) -> Iterator[pb_grpc.StoreStub]:
    with grpc.insecure_channel(store_address, options=[("grpc.max_receive_message_length", -1)]) as channel:
        yield pb_grpc.StoreStub(channel)


@pytest.fixture
def make_broker(store_address: str) -> Iterator[Callable[..., BrokerServer]]:
    started: list[tuple[BrokerServer, GrpcStoreClient]] = []

    def make(metrics: BrokerMetrics | None = None, **overrides) -> BrokerServer:
        config = BrokerConfig(**{"port": 0, "store_address": store_address, **overrides})
        client = GrpcStoreClient(config.store_address)
        broker = build_server(config, client, metrics=metrics)
        broker.start()
        started.append((broker, client))
        return broker

    yield make
    for broker, client in started:
        broker.stop(1.0)
        client.close()


@pytest.fixture
def broker(make_broker: Callable[..., BrokerServer]) -> BrokerServer:
    return make_broker()


@pytest.fixture
def v2(broker: BrokerServer) -> Iterator[s_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield s_grpc.MessagingServiceStub(channel)
