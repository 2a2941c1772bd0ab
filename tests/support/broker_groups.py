"""Two broker groups (one store each, real gRPC servers on 127.0.0.1:0) behind one broker in
this process, with the topic routes given by the test instead of etcd (issue 17):

* ``TwoGroups``: the stores (``store_a`` / ``store_b`` clients), the broker, a v2 stub and
  ``routes`` (a dict: topic -> TopicRoute, read by the broker at each request);
* ``create(topic, queue_nums, message_type)``: the topic in both stores and in the route, as
  ``pyrmq topic create --groups`` does;
* ``mark_down(group)``: the group's store client says it is failing over (what a client
  following a group with no master says), so routes and sends treat it as down;
* ``depth(group, topic)``: each queue's max offset once the group's store has dispatched all
  it appended (a send is acknowledged after the CommitLog append; the ConsumeQueue, which the
  max offset comes from, is written behind it by reput, so reading it at once can miss the last
  sends: 7 instead of 8 under load).

``two_groups(tmp_path, metrics=BrokerMetrics())`` gives the broker metrics;
``two_groups(tmp_path, etcd=client, registered=(...))`` reads and changes the routes in that
etcd instead (a ``RouteView`` and ``RouteStore``, as ``python -m services.broker`` with
``etcd_endpoints``), with ``registered`` as the cluster's groups.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.__main__ import build_broker
from services.broker.broker_groups import ClusterView
from services.broker.config import BrokerConfig
from services.broker.metrics import BrokerMetrics
from services.broker.v2.server import BrokerServer
from services.coordination.route_view import RouteStore, RouteView
from services.domain.routes import QueueData, TopicRoute
from services.runtime.clock import SystemClock
from services.runtime.etcd.rpc.client import EtcdClient
from services.store.client.client import GrpcStoreClient
from services.store.client.model import TopicInfo
from services.store.rpc.server import build_server as build_store_server
from services.store.rpc.server import stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config
from tests.support.waits import wait_until

GROUP_A = "broker-a"
GROUP_B = "broker-b"


class DownableClient(GrpcStoreClient):
    """A store client whose ``failing_over`` a test can force."""

    down = False

    @property
    def failing_over(self) -> bool:
        return self.down or super().failing_over


class StaticRoutes:
    def __init__(self) -> None:
        self.routes: dict[str, TopicRoute] = {}

    def route(self, topic: str) -> TopicRoute | None:
        return self.routes.get(topic)


@dataclass
class TwoGroups:
    broker: BrokerServer
    v2: s_grpc.MessagingServiceStub
    stores: dict[str, DownableClient]
    routes: StaticRoutes
    servers: dict[str, grpc.Server] = field(default_factory=dict)
    etcd: EtcdClient | None = None
    view: RouteView | None = None
    filestores: dict[str, FileStore] = field(default_factory=dict)

    def routes_seen(self, predicate, timeout_s: float = 5.0) -> bool:
        """The broker's view of the etcd routes satisfied ``predicate`` within ``timeout_s``."""
        assert self.view is not None
        return self.view.wait_for(predicate, timeout_s)

    def create(self, topic: str, queue_nums: int = 4, message_type: str = "MIXED", groups=(GROUP_A, GROUP_B)) -> None:
        for group in groups:
            self.stores[group].create_topic(TopicInfo(topic, queue_nums, queue_nums, 6, message_type))
        self.routes.routes[topic] = TopicRoute(
            topic, message_type, tuple(QueueData(g, queue_nums, queue_nums) for g in groups)
        )

    def mark_down(self, group: str, down: bool = True) -> None:
        self.stores[group].down = down

    def stop_store(self, group: str) -> None:
        stop_server(self.servers[group], 0.5)

    def dispatched(self, group: str, timeout_s: float = 5.0) -> None:
        """Wait until the group's store has dispatched (reput) everything in its CommitLog."""
        reput = self.filestores[group].reput
        assert reput is not None
        wait_until(
            lambda: reput.dispatch_behind_bytes == 0,
            timeout_s,
            f"{group}: dispatch caught up",
            describe=lambda: f"{reput.dispatch_behind_bytes} bytes behind",
        )

    def depth(self, group: str, topic: str, queue_nums: int = 4) -> list[int]:
        """Messages in each queue of the topic in the group (max offset per queue), once every
        message acknowledged so far is dispatched to the ConsumeQueues."""
        self.dispatched(group)
        return [self.stores[group].queue_offsets(topic, q)[1] for q in range(queue_nums)]


@contextmanager
def two_groups(
    tmp_path: Path, etcd: EtcdClient | None = None, registered=(), metrics: BrokerMetrics | None = None, **config
) -> Iterator[TwoGroups]:
    with ExitStack() as stack:
        addresses: dict[str, str] = {}
        servers: dict[str, grpc.Server] = {}
        filestores: dict[str, FileStore] = {}
        for group in (GROUP_A, GROUP_B):
            store = FileStore(
                small_config(tmp_path / group, commitlog_file_size_bytes=8 << 20, broker_name=group), SystemClock()
            )
            store.start()
            stack.callback(store.shutdown)
            filestores[group] = store
            server, port = build_store_server(store, "127.0.0.1", 0)
            server.start()
            stack.callback(stop_server, server, 0.5)
            servers[group] = server
            addresses[group] = f"127.0.0.1:{port}"
        clients = {group: DownableClient(address) for group, address in addresses.items()}
        for client in clients.values():
            stack.callback(client.close)
        routes = StaticRoutes()
        view = None
        if etcd is None:
            cluster = ClusterView(routes, lambda name: clients[name])
        else:
            view = RouteView(etcd)
            stack.callback(view.close)
            assert view.open(5.0)
            cluster = ClusterView(view, lambda name: clients[name], RouteStore(etcd), lambda: list(registered))
        broker_config = BrokerConfig(
            **{
                "port": 0,
                "store_address": addresses[GROUP_A],
                "broker_name": GROUP_A,
                "tls_mode": "plaintext",
                **config,
            }
        )
        broker = build_broker(broker_config, clients[GROUP_A], metrics=metrics, cluster=cluster)
        broker.start()
        stack.callback(broker.stop, 1.0)
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{broker.port}"))
        yield TwoGroups(broker, s_grpc.MessagingServiceStub(channel), clients, routes, servers, etcd, view, filestores)
