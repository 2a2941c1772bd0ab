"""TLS and plaintext on the one remoting port, as on the v2 port (the broker's tls_mode and
certificate): a connection that opens with a TLS ClientHello is TLS."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from services.broker.remoting.door import build_remoting
from services.broker.v2.server import BrokerServer
from services.domain.remoting.codes import RequestCode, ResponseCode
from tests.support.remoting_client import RemotingTestClient
from tests.support.waits import wait_until


def trusting(broker: BrokerServer, tmp_path: Path) -> ssl.SSLContext:
    certificate = broker.client_port.certificate
    assert certificate is not None
    ca = tmp_path / "broker.crt"
    ca.write_bytes(certificate.cert_pem)
    return ssl.create_default_context(cafile=str(ca))


@pytest.mark.parametrize("tls_mode", ["both", "tls"])
def test_tls_clients_and_plaintext_ones_share_the_port(
    make_broker: Callable[..., BrokerServer], topics: Callable[..., None], tmp_path: Path, tls_mode: str
) -> None:
    broker = make_broker(tls_mode=tls_mode)
    door = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False, certificate=broker.client_port.certificate)
    door.start()
    try:
        topics("TlsT", queue_nums=1)
        with RemotingTestClient(door.context.address, tls=trusting(broker, tmp_path)) as secure:
            route = secure.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TlsT"})
            assert route.code == ResponseCode.SUCCESS, route.remark
            sent = secure.send_v2("TlsT", b"x" * 100_000, {"UNIQ_KEY": "TLS1"})  # frames over many TLS records
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            pulled = secure.pull("G", "TlsT", 0, 0, sys_flag=0x2 | 0x4, suspend_ms=10_000)
            assert pulled.code == ResponseCode.SUCCESS and b"x" * 100_000 in pulled.body
        with RemotingTestClient(door.context.address) as plain:
            if tls_mode == "both":
                assert plain.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TlsT"}).code == ResponseCode.SUCCESS
            else:  # plaintext on a TLS-only port: closed, answered never
                plain.oneway(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TlsT"})
                wait_until(plain.closed.is_set, 10, what="the plaintext connection closed")
    finally:
        door.stop()


def test_a_bad_handshake_closes_that_connection_alone(make_broker: Callable[..., BrokerServer], tmp_path: Path) -> None:
    broker = make_broker()
    door = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False, certificate=broker.client_port.certificate)
    door.start()
    try:
        host, _, port = door.context.address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as garbage:
            garbage.sendall(b"\x16\x03\x01\x00\x05hello")  # a handshake record that is not one
            wait_until(lambda: garbage.recv(100) == b"", 10, what="the connection closed")
        with RemotingTestClient(door.context.address, tls=trusting(broker, tmp_path)) as secure:
            assert secure.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
    finally:
        door.stop()
