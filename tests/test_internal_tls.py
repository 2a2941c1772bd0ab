"""TLS between pyrmq's own services (services/runtime/rpc/tls.py): a store that serves mutual TLS, and a
broker and a scheduler that reach it with a CA and a client certificate, all as real processes
configured through the environment. A plaintext or certificate-less client gets nothing."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime.rpc.tls import TlsFiles, open_channel
from tests.support.pki import make_pki
from tests.support.processes import Process
from tests.support.topics import create_topics_at
from tests.support.v2_requests import message, receive, send_ok

READY = re.compile(r"^pyrmq-(?P<name>\w+) ready grpc=(?P<grpc>\S+) ")


def health(address: str, tls: TlsFiles | None) -> int:
    with open_channel(address, tls) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_mutual_tls_from_broker_and_scheduler_to_the_store(tmp_path: Path, processes: list[Process]) -> None:
    pki = make_pki(tmp_path)
    store = Process(
        [sys.executable, "-m", "services.store"],
        tmp_path,
        {
            "PYRMQ_STORE_DATA_DIR": str(tmp_path / "data"),
            "PYRMQ_STORE_PORT": "0",
            "PYRMQ_STORE_METRICS_PORT": "-1",
            "PYRMQ_STORE_TLS_CERT_PATH": pki["server.pem"],
            "PYRMQ_STORE_TLS_KEY_PATH": pki["server.key"],
            "PYRMQ_STORE_TLS_CLIENT_CA_PATH": pki["ca.pem"],
        },
    )
    processes.append(store)
    store_address = store.wait_line(READY)["grpc"]
    client_tls = {
        "STORE_TLS_CA_PATH": pki["ca.pem"],
        "STORE_TLS_CERT_PATH": pki["client.pem"],
        "STORE_TLS_KEY_PATH": pki["client.key"],
    }
    broker = Process(
        [sys.executable, "-m", "services.broker"],
        tmp_path,
        {
            "PYRMQ_BROKER_PORT": "0",
            "PYRMQ_BROKER_REMOTING_PORT": "-1",
            "PYRMQ_BROKER_METRICS_PORT": "-1",
            "PYRMQ_BROKER_STORE_ADDRESS": store_address,
            **{f"PYRMQ_BROKER_{k}": v for k, v in client_tls.items()},
        },
    )
    processes.append(broker)
    broker_address = broker.wait_line(READY)["grpc"]
    scheduler = Process(
        [sys.executable, "-m", "services.scheduler"],
        tmp_path,
        {
            "PYRMQ_SCHEDULER_DATA_DIR": str(tmp_path / "data"),
            "PYRMQ_SCHEDULER_PORT": "0",
            "PYRMQ_SCHEDULER_METRICS_PORT": "-1",
            "PYRMQ_SCHEDULER_STORE_ADDRESS": store_address,
            **{f"PYRMQ_SCHEDULER_{k}": v for k, v in client_tls.items()},
        },
    )
    processes.append(scheduler)
    scheduler.wait_line(READY)

    create_topics_at(broker_address, "TlsLinks")  # the admin API, over the TLS link too
    with grpc.insecure_channel(broker_address) as channel:  # through the broker, over the TLS link
        v2 = s_grpc.MessagingServiceStub(channel)
        send_ok(v2, message("TlsLinks", body=b"over mutual TLS"))
        status, got, _ = receive(v2, "TlsLinks", group="TlsGroup")
        assert status.code == d.OK and [m.body for m in got] == [b"over mutual TLS"]

    full = TlsFiles(pki["ca.pem"], pki["client.pem"], pki["client.key"])
    assert health(store_address, full) == health_pb2.HealthCheckResponse.SERVING
    for refused in (None, TlsFiles(pki["ca.pem"])):  # plaintext; TLS without a client certificate
        with pytest.raises(grpc.RpcError) as info:
            health(store_address, refused)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    health_cli = Process(
        [
            sys.executable,
            "-m",
            "services.launcher.cli",
            "health",
            store_address,
            "--ca-file",
            pki["ca.pem"],
            "--cert-file",
            pki["client.pem"],
            "--key-file",
            pki["client.key"],
        ],
        tmp_path,
    )
    assert health_cli.popen.wait(60) == 0, health_cli.log()

    for process in (scheduler, broker, store):
        assert process.stop(signal.SIGTERM) == 0, process.log()
