"""Replication over TLS: stores that serve mutual TLS only (tls_cert_path, tls_client_ca_path),
a slave that reaches its master with ha_tls_ca_path and presents its own certificate. A slave
without ha_tls_ca_path gets nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from services.runtime.rpc.tls import TlsFiles
from services.store.config import BrokerRole, StoreConfig
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.filestore import message, small_config
from tests.support.pki import make_pki
from tests.support.waits import wait_until


@pytest.fixture
def tls_stores(tmp_path: Path) -> Iterator:
    pki = make_pki(tmp_path)
    started: list[tuple[FileStore, grpc.Server]] = []

    def start(name: str, **overrides) -> tuple[FileStore, int]:
        config: StoreConfig = small_config(
            tmp_path / name,
            tls_cert_path=pki["server.pem"],
            tls_key_path=pki["server.key"],
            tls_client_ca_path=pki["ca.pem"],
            ha_send_heartbeat_interval_ms=100,
            ha_reconnect_interval_max_ms=200,
            **overrides,
        )
        store = FileStore(config)
        store.start()
        server, port = build_server(
            store, "127.0.0.1", 0, max_workers=8, tls=TlsFiles(pki["ca.pem"], pki["server.pem"], pki["server.key"])
        )
        server.start()
        started.append((store, server))
        return store, port

    yield start, pki
    for store, server in reversed(started):
        stop_server(server, grace_s=0)
        store.shutdown()


def test_a_slave_replicates_from_a_master_that_serves_mutual_tls(tls_stores):
    start, pki = tls_stores
    master, port = start("master", broker_role=BrokerRole.SYNC_MASTER, sync_replicas_timeout_ms=5000)
    slave, _ = start(
        "slave",
        broker_role=BrokerRole.SLAVE,
        replica_id=1,
        ha_master_address=f"127.0.0.1:{port}",
        ha_tls_ca_path=pki["ca.pem"],
    )
    for i in range(20):  # SYNC_MASTER: each put returns once the slave confirmed it, over TLS
        [result] = master.put_messages([message(queue_id=i % 2, body=f"tls-{i}".encode() * 30)])
        assert result.ok, result
    end = master.commitlog.max_offset
    assert slave.commitlog.max_offset == end
    assert slave.commitlog.read_bytes(0, end) == master.commitlog.read_bytes(0, end)


def test_a_slave_without_the_ca_gets_nothing(tls_stores):
    start, _ = tls_stores
    master, port = start("master")
    slave, _ = start("slave", broker_role=BrokerRole.SLAVE, replica_id=1, ha_master_address=f"127.0.0.1:{port}")
    [result] = master.put_messages([message(body=b"secret" * 20)])
    assert result.ok
    with pytest.raises(AssertionError):  # plaintext against a TLS-only port: no session, no bytes
        wait_until(lambda: slave.commitlog.max_offset > 0, timeout_s=1.5)
    assert slave.replication.connection is not None and slave.replication.connection.sessions == 0
