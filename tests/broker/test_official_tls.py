"""The official clients with TLS on, against the one client port of ``tls_mode = both``: each
trusts the broker's generated certificate through grpc's ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``
(the Python client's ``tls_enable=True`` and the Node.js client's ``sslEnabled: true`` use the
default roots), and a plaintext client works on the same port at the same time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.front import HaproxyFront
from services.broker.v2.server import BrokerServer
from tests.support.node_client import consume as node_consume
from tests.support.node_client import run_node
from tests.support.official_client import consume, run_client
from tests.support.store_reads import wait_dispatched


def create_topic(store_stub, name: str) -> None:
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name=name, read_queue_nums=2, write_queue_nums=2, perm=6)
        ),
        timeout=10,
    )


def tls_broker(make_broker: Callable[..., BrokerServer], tmp_path: Path, monkeypatch) -> tuple[str, HaproxyFront]:
    broker = make_broker(data_dir=str(tmp_path / "broker"))
    assert broker.client_port is not None and broker.client_port.certificate is not None
    cert = Path(broker.client_port.certificate.cert_path)
    assert cert.parent == tmp_path / "broker" / "tls"
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(cert))  # inherited by the client processes
    assert broker.client_port.front is not None
    return f"127.0.0.1:{broker.port}", broker.client_port.front


@pytest.mark.needs("rocketmq-python-client")
def test_python_client_with_tls_enable_sends_and_receives(make_broker, store_stub, tmp_path, monkeypatch) -> None:
    endpoint, front = tls_broker(make_broker, tmp_path, monkeypatch)
    create_topic(store_stub, "TlsPy")
    messages = [{"topic": "TlsPy", "body": f"tls {i}"} for i in range(5)]
    results, _ = run_client(tmp_path, endpoint, messages, topics=("TlsPy",), tls=True)
    assert [r["ok"] for r in results] == [True] * 5, results
    tls_connections = front.connections_by_backend()["tls"]
    assert tls_connections > 0 and front.connections_by_backend()["plain"] == 0
    # A plaintext client on the same port, then.
    plain, _ = run_client(tmp_path, endpoint, [{"topic": "TlsPy", "body": "plain"}], topics=("TlsPy",))
    assert plain[0]["ok"], plain
    after = front.connections_by_backend()
    assert after["tls"] == tls_connections and after["plain"] > 0
    wait_dispatched(store_stub, "TlsPy", 6)
    got = consume(tmp_path, endpoint, group="TlsPyGroup", topic="TlsPy", count=6, tls=True)
    assert sorted(m["body"] for m in got) == sorted([f"tls {i}" for i in range(5)] + ["plain"])


@pytest.mark.needs("rocketmq-python-client")
def test_python_client_with_tls_fails_without_trusting_the_certificate(
    make_broker, store_stub, tmp_path, monkeypatch
) -> None:
    endpoint, _ = tls_broker(make_broker, tmp_path, monkeypatch)
    monkeypatch.delenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")  # the system's roots do not vouch for it
    create_topic(store_stub, "TlsUntrusted")
    results, _ = run_client(
        tmp_path, endpoint, [{"topic": "TlsUntrusted", "body": "x"}], topics=("TlsUntrusted",), tls=True, timeout=2
    )
    assert not results[0]["ok"], results


@pytest.mark.needs("rocketmq-client-nodejs")
def test_nodejs_client_with_ssl_enabled_sends_and_receives(make_broker, store_stub, tmp_path, monkeypatch) -> None:
    endpoint, front = tls_broker(make_broker, tmp_path, monkeypatch)
    create_topic(store_stub, "TlsNode")
    sent, _ = node_send_tls(tmp_path, endpoint, [{"topic": "TlsNode", "body": f"node {i}"} for i in range(3)])
    assert [r["ok"] for r in sent] == [True] * 3, sent
    wait_dispatched(store_stub, "TlsNode", 3)
    deliveries, _ = node_consume(tmp_path, endpoint, group="TlsNodeGroup", topic="TlsNode", count=3, tls=True)
    assert sorted(d["body"] for d in deliveries) == ["node 0", "node 1", "node 2"]
    totals = front.connections_by_backend()
    assert totals["tls"] > 0 and totals["plain"] == 0  # every connection the Node client made was TLS


def node_send_tls(home: Path, endpoint: str, messages: list[dict]) -> tuple[list[dict], dict]:
    lines = run_node("send.mjs", home, {"endpoint": endpoint, "topics": ["TlsNode"], "messages": messages, "tls": True})
    assert lines and "settings" in lines[-1], lines
    return lines[:-1], lines[-1]["settings"]
