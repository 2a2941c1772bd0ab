"""Real store and broker servers in this process, on 127.0.0.1:0, as fixtures:

* ``store_address``: a FileStore behind the store's gRPC server;
* ``store_stub``: a StoreStub on it;
* ``make_broker(**config)``: a real broker server (GrpcStoreClient -> that store), stopped
  after the test; ``broker``: one with the default config;
* ``v2``: a MessagingService stub on ``broker`` (send ``METADATA`` of tests/support/v2_requests.py
  for the client id);
* ``topics(*names, message_type="MIXED", queue_nums=8)``: create topics in that store, as an
  operator does before clients send (auto-create is off; tests/support/topics.py).

Exposed by the conftest.py of tests/broker, tests/scheduler, tests/txcheck and tests/pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.broker.__main__ import build_broker
from services.broker.config import BrokerConfig
from services.broker.metrics import BrokerMetrics
from services.broker.v2.server import BrokerServer
from services.runtime.clock import SystemClock
from services.store.client.client import GrpcStoreClient
from services.store.rpc.server import build_server as build_store_server
from services.store.rpc.server import stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config
from tests.support.topics import MIXED, QUEUE_NUMS, create_topics


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
        broker = build_broker(config, client, metrics=metrics)
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


@pytest.fixture
def topics(store_address: str) -> Callable[..., None]:
    def create(*names: str, message_type: str = MIXED, queue_nums: int = QUEUE_NUMS) -> None:
        client = GrpcStoreClient(store_address)
        try:
            create_topics(client, *names, message_type=message_type, queue_nums=queue_nums)
        finally:
            client.close()

    return create
