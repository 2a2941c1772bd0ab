"""Topic routes in a real etcd (services/coordination/route_view.py): compare-and-swap updates
that never lose a concurrent writer's group, and a watched view that sees every change."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from services.coordination.route_view import RouteStore, RouteView, route_key
from services.domain.routes import QueueData, TopicRoute
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.process import free_ports
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.needs("etcd")


@pytest.fixture
def etcd(etcd_server: EtcdCluster) -> Iterator[EtcdClient]:
    client = etcd_server.client()
    yield client
    client.close()


def add_group(topic: str, group: str, queues: int = 8):
    def change(route: TopicRoute | None) -> TopicRoute:
        return (route or TopicRoute(topic, "NORMAL")).with_group(QueueData(group, queues, queues))

    return change


def test_concurrent_admins_each_add_their_group(etcd: EtcdClient) -> None:
    store = RouteStore(etcd)
    assert store.get("Orders") is None
    threads = [threading.Thread(target=store.update, args=("Orders", add_group("Orders", f"g{i}"))) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    route = store.get("Orders")
    assert route is not None and route.groups == [f"g{i}" for i in range(8)]  # none lost to a race
    assert store.update("Orders", lambda r: r) == route  # no change, no write
    assert store.update("Orders", lambda r: None) is None and store.get("Orders") is None
    with pytest.raises(ValueError):
        route_key("a/b")


def test_the_view_reads_then_follows_every_change(etcd: EtcdClient) -> None:
    store = RouteStore(etcd)
    store.update("Early", add_group("Early", "broker-a"))
    view = RouteView(etcd).start()
    try:
        assert list(view.routes) == ["Early"]
        store.update("Late", add_group("Late", "broker-b", 4))
        assert view.wait_for(lambda routes: "Late" in routes, 5)
        late = view.route("Late")
        assert late is not None and late.write_queues() == [("broker-b", i) for i in range(4)]
        store.update("Early", lambda r: None)
        assert view.wait_for(lambda routes: "Early" not in routes, 5)
        etcd.put(route_key("Broken"), b"not json")  # logged and ignored, the view goes on
        store.update("After", add_group("After", "broker-a"))
        assert view.wait_for(lambda routes: "After" in routes, 5) and "Broken" not in view.routes
    finally:
        view.stop()


def test_an_opened_view_follows_on_its_own_thread_until_closed(etcd: EtcdClient) -> None:
    store = RouteStore(etcd)
    store.update("Early", add_group("Early", "g1"))
    view = RouteView(etcd)
    try:
        assert view.open(5.0)
        assert view.route("Early") == store.get("Early")
        store.update("Late", add_group("Late", "g2", queues=4))
        assert view.wait_for(lambda routes: "Late" in routes, 5.0)
        assert view.route("Late").group("g2").write_queue_nums == 4
    finally:
        view.close()
    store.update("AfterClose", add_group("AfterClose", "g1"))
    assert not view.wait_for(lambda routes: "AfterClose" in routes, 0.5)


def test_a_view_opened_before_etcd_answers_says_so_and_keeps_trying() -> None:
    [port] = free_ports(1)
    client = EtcdClient([f"127.0.0.1:{port}"], timeout_s=0.2, attempt_timeout_s=0.1)
    view = RouteView(client)
    try:
        assert not view.open(0.3)
        assert view.routes == {}
    finally:
        view.close()
        client.close()
