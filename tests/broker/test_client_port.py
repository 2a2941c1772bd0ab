"""One client port, TLS and plaintext (services/broker/front.py, tls_cert.py): ``tls_mode`` both
(HAProxy in front), tls and plaintext, with the real broker over a real store.

Covers: plaintext and TLS channels to the same port (the TLS one trusting the generated
certificate); health, reflection, admin and the pull extension on that port in every mode;
the client's own address seen through the front (born host, ACL source IPs); connections that
send garbage, stop half-way through a ClientHello or send nothing are closed within bounded time
without blocking others or leaking threads and descriptors; the certificate is made once
(0600) and reused; a configured one replaces it; HAProxy restarted if it dies.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc
from pyrmq.pull.v1 import pull_pb2 as pull_pb
from pyrmq.pull.v1 import pull_pb2_grpc as pull_grpc

from services.broker.__main__ import build_broker
from services.broker.config import BrokerConfig
from services.broker.front import FrontPeers, parse_sessions
from services.broker.tls_cert import load_or_create, self_signed
from services.broker.v2.server import BrokerServer
from services.runtime.clock import SystemClock
from services.store.client.model import TopicInfo
from tests.support.store_double import StoreDouble
from tests.support.v2_requests import METADATA
from tests.support.waits import wait_until

TOPIC = "PortTopic"
CLOCK = SystemClock()


@pytest.fixture
def store_client(tmp_path: Path) -> Iterator[StoreDouble]:
    double = StoreDouble(tmp_path / "store", SystemClock())
    double.create_topic(TopicInfo(TOPIC, 2, 2, 6, "NORMAL"))
    yield double
    double.close()


@pytest.fixture
def start_broker(store_client: StoreDouble, tmp_path: Path) -> Iterator[Callable[..., BrokerServer]]:
    started: list[BrokerServer] = []

    def start(**overrides: object) -> BrokerServer:
        config = BrokerConfig(**{"port": 0, "data_dir": str(tmp_path / "broker"), **overrides})  # type: ignore[arg-type]
        broker = build_broker(config, store_client)
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop(1.0)


def tls_channel(port: int, cert_path: str) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(Path(cert_path).read_bytes())
    return grpc.secure_channel(f"127.0.0.1:{port}", credentials)


def serving(channel: grpc.Channel) -> bool:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def send_one(channel: grpc.Channel, body: bytes = b"hello") -> s.SendMessageResponse:
    message = d.Message(
        topic=d.Resource(name=TOPIC),
        body=body,
        system_properties=d.SystemProperties(message_id="01" + os.urandom(15).hex(), body_encoding=d.IDENTITY),
    )
    return s_grpc.MessagingServiceStub(channel).SendMessage(
        s.SendMessageRequest(messages=[message]), metadata=METADATA, timeout=5
    )


def test_plaintext_and_tls_channels_share_the_port_in_mode_both(
    start_broker: Callable[..., BrokerServer], store_client: StoreDouble
) -> None:
    broker = start_broker()
    assert broker.client_port is not None and broker.client_port.front is not None
    certificate = broker.client_port.certificate
    assert certificate is not None and certificate.generated and certificate.cert_path
    with (
        grpc.insecure_channel(f"127.0.0.1:{broker.port}") as plain,
        tls_channel(broker.port, certificate.cert_path) as tls,
    ):
        assert serving(plain) and serving(tls)
        for channel in (plain, tls):
            reply = send_one(channel)
            assert reply.status.code == d.OK, reply.status
        # Both connections are through the front, and each send's born host is the client's own
        # address (its ephemeral port), not HAProxy's connection to the backend.
        sessions = broker.client_port.front.sessions()
        assert len(sessions) == 2
        clients = {peer.removeprefix("ipv4:") for peer in sessions.values()}
        backends = {peer.removeprefix("ipv4:") for peer in sessions}
        born = {message.born_host for message in store_client.sent}
        assert born == clients and not born & backends


def test_a_tls_client_that_trusts_another_certificate_is_refused(
    start_broker: Callable[..., BrokerServer], tmp_path: Path
) -> None:
    broker = start_broker()
    other = tmp_path / "other.crt"
    other.write_bytes(self_signed(["localhost", "127.0.0.1"], CLOCK.now_ms())[0])
    with tls_channel(broker.port, str(other)) as channel, pytest.raises(grpc.RpcError) as failure:
        serving(channel)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("mode", ["both", "tls", "plaintext"])
def test_health_reflection_admin_and_pull_work_on_the_port_in_every_mode(
    start_broker: Callable[..., BrokerServer], mode: str
) -> None:
    broker = start_broker(tls_mode=mode)
    if mode == "plaintext":
        assert broker.client_port is not None and broker.client_port.certificate is None
        channel = grpc.insecure_channel(f"127.0.0.1:{broker.port}")
    else:
        assert broker.client_port is not None and broker.client_port.certificate is not None
        channel = tls_channel(broker.port, broker.client_port.certificate.cert_path)
    with channel:
        assert serving(channel)
        services = next(
            iter(
                reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
                )
            )
        )
        names = {service.name for service in services.list_services_response.service}
        assert {"apache.rocketmq.v2.MessagingService", "pyrmq.pull.v1.Pull", "pyrmq.admin.v1.Admin"} <= names
        assert send_one(channel).status.code == d.OK
        topics = admin_grpc.AdminStub(channel).ListTopics(admin_pb.ListTopicsRequest(), timeout=5)
        assert TOPIC in {topic.name for topic in topics.topics}
        pulled = list(
            pull_grpc.PullStub(channel).PullRecords(
                pull_pb.PullRecordsRequest(topic=TOPIC, queue_id=0, queue_offset=0),
                metadata=METADATA,
                timeout=5,
            )
        )
        assert pulled and pulled[0].status.code == d.OK


def test_the_generated_certificate_is_private_and_reused(tmp_path: Path) -> None:
    first = load_or_create(str(tmp_path), ["localhost", "127.0.0.1"], CLOCK.now_ms())
    again = load_or_create(str(tmp_path), ["localhost", "127.0.0.1"], CLOCK.now_ms())
    assert first.cert_path == again.cert_path and first.cert_pem == again.cert_pem and first.key_pem == again.key_pem
    for name in ("broker.crt", "broker.key"):
        assert stat.S_IMODE((tmp_path / "tls" / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    assert len(first.fingerprint.split(":")) == 32
    in_memory = load_or_create("", ["localhost"], CLOCK.now_ms())
    assert in_memory.cert_path == "" and in_memory.cert_pem != first.cert_pem


def test_a_configured_certificate_replaces_the_generated_one(
    start_broker: Callable[..., BrokerServer], tmp_path: Path
) -> None:
    cert, key = self_signed(["127.0.0.1"], CLOCK.now_ms())
    (tmp_path / "mine.crt").write_bytes(cert)
    (tmp_path / "mine.key").write_bytes(key)
    broker = start_broker(tls_cert_path=str(tmp_path / "mine.crt"), tls_key_path=str(tmp_path / "mine.key"))
    assert broker.client_port is not None and broker.client_port.certificate is not None
    assert not broker.client_port.certificate.generated
    assert not (tmp_path / "broker" / "tls").exists()
    with tls_channel(broker.port, str(tmp_path / "mine.crt")) as channel:
        assert serving(channel)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_garbage_half_hellos_and_silence_are_closed_without_blocking_others_or_leaking(
    start_broker: Callable[..., BrokerServer],
) -> None:
    broker = start_broker(client_hello_timeout_ms=500)
    assert broker.client_port is not None and broker.client_port.front is not None
    front_pid = broker.client_port.front.pid
    assert front_pid is not None
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        assert serving(channel)  # warm: the gRPC server's own threads and descriptors exist
        threads, fds, front_fds = threading.active_count(), open_fds(os.getpid()), open_fds(front_pid)
        kinds = {
            "garbage": b"GET / HTTP/1.1\r\n\r\n",
            "half hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a ClientHello's first 11 bytes
            "nothing": b"",
        }
        closed_after: dict[str, float] = {}
        for kind, first_bytes in kinds.items():
            sockets = []
            for _ in range(500 // len(kinds) + 1):
                sock = socket.create_connection(("127.0.0.1", broker.port))
                sock.settimeout(5)
                if first_bytes:
                    sock.sendall(first_bytes)
                sockets.append(sock)
            started = time.monotonic()
            # Meanwhile a real client works on the same port.
            assert serving(channel) and serving(grpc.insecure_channel(f"127.0.0.1:{broker.port}"))
            for sock in sockets:
                try:
                    assert sock.recv(1024) == b""  # closed by the front (EOF) ...
                except ConnectionResetError:
                    pass  # ... or reset
                sock.close()
            closed_after[kind] = time.monotonic() - started
        assert closed_after["garbage"] < 1.0, closed_after  # at once, not after the hello timeout
        assert closed_after["half hello"] < 3.0 and closed_after["nothing"] < 3.0, closed_after
        wait_until(
            lambda: (threading.active_count(), open_fds(os.getpid()), open_fds(front_pid)),
            5,
            f"no more than {threads} threads and {fds} / {front_fds} descriptors (ours / the front's)",
            accept=lambda now: all(count <= before for count, before in zip(now, (threads, fds, front_fds))),
        )


def test_haproxy_is_restarted_if_it_dies(start_broker: Callable[..., BrokerServer]) -> None:
    broker = start_broker()
    assert broker.client_port is not None and broker.client_port.front is not None
    front = broker.client_port.front
    old_pid = front.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: front.pid != old_pid and not front.exited(), 10, "HAProxy restarted")
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        assert serving(channel)


SHOW_SESS = """\
0x55e9d3c498c0: [26/Nov/2026:14:27:12.762487] id=0 proto=tcpv4 source=10.1.2.3:54214
  flags=0x4a, conn_retries=0, conn_exp=<NEVER> conn_et=0x000 srv_conn=0x55e9d3b887f0, pend_pos=(nil) waiting=0 epoch=0
  frontend=client (id=2 mode=tcp), listener=? (id=1) addr=127.0.0.1:18556
  backend=plain (id=3 mode=tcp) addr=127.0.0.1:45700
  server=grpc (id=1) addr=127.0.0.1:18557
0x55e9d3c498c1: [26/Nov/2026:14:27:12.762487] id=1 proto=tcpv6 source=2001:db8::7:41000
  frontend=client (id=2 mode=tcp), listener=? (id=1) addr=:::18556
  backend=tls (id=4 mode=tcp) addr=127.0.0.1:45702
0x55e9d3c498c2: [26/Nov/2026:14:27:12.762487] id=2 proto=tcpv4 source=10.9.9.9:1
  frontend=client (id=2 mode=tcp), listener=? (id=1) addr=127.0.0.1:18556
  backend=<NONE> (id=-1 mode=-)
0x55e9d3d5fac0: [26/Nov/2026:14:27:13.756028] id=3 proto=unix_stream source=unix:1
  frontend=GLOBAL (id=0 mode=tcp), listener=? (id=1) addr=unix:1
  backend=<NONE> (id=-1 mode=-)
"""


def test_show_sess_maps_backend_connections_to_clients() -> None:
    assert parse_sessions(SHOW_SESS) == {
        "ipv4:127.0.0.1:45700": "ipv4:10.1.2.3:54214",
        "ipv4:127.0.0.1:45702": "ipv6:[2001:db8::7]:41000",
    }


def test_front_peers_cache_refresh_and_unknown_peers() -> None:
    table = {"ipv4:127.0.0.1:45700": "ipv4:10.1.2.3:54214"}
    calls: list[float] = []
    now = [100.0]

    def sessions() -> dict[str, str]:
        calls.append(now[0])
        return dict(table)

    peers = FrontPeers(sessions, lambda: now[0], ttl_s=10.0)
    assert peers.resolve("ipv4:10.0.0.1:5") == "ipv4:10.0.0.1:5" and not calls  # not through the front
    assert peers.resolve("ipv4:127.0.0.1:45700") == "ipv4:10.1.2.3:54214" and len(calls) == 1
    now[0] += 5
    assert peers.resolve("ipv4:127.0.0.1:45700") == "ipv4:10.1.2.3:54214" and len(calls) == 1  # cached
    # A peer the front does not know is a direct local connection: its own address, and not asked
    # again until the TTL has passed (its every call must not cost a query of HAProxy).
    now[0] += 1
    assert peers.resolve("ipv4:127.0.0.1:9999") == "ipv4:127.0.0.1:9999" and len(calls) == 2
    now[0] += 1
    assert peers.resolve("ipv4:127.0.0.1:9999") == "ipv4:127.0.0.1:9999" and len(calls) == 2
    # After the TTL an entry is checked again: the front's connection ended, its port is reused.
    table["ipv4:127.0.0.1:45700"] = "ipv4:10.7.7.7:1"
    now[0] += 11
    assert peers.resolve("ipv4:127.0.0.1:45700") == "ipv4:10.7.7.7:1" and len(calls) == 3


@pytest.mark.parametrize("mode", ["both", "tls", "plaintext"])
def test_brokers_with_reuse_port_share_the_client_port_and_each_has_a_local_port(
    start_broker: Callable[..., BrokerServer], mode: str
) -> None:
    first = start_broker(tls_mode=mode, reuse_port=True)
    second = start_broker(tls_mode=mode, reuse_port=True, port=first.port)
    assert second.port == first.port
    locals_ = [broker.client_port.local_port for broker in (first, second)]  # type: ignore[union-attr]
    assert all(locals_) and len(set(locals_)) == 2 and first.port not in locals_
    for port in locals_:  # each process alone serves its own loopback port, in plaintext
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert serving(channel) and send_one(channel).status.code == d.OK
    if mode == "both":  # the kernel spreads client connections over the two listening sockets
        separate = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.insecure_channel(f"127.0.0.1:{first.port}", options=separate) for _ in range(16)]
        try:
            assert all(serving(channel) for channel in channels)
            fronts = [broker.client_port.front for broker in (first, second)]  # type: ignore[union-attr]
            counts = [len(front.sessions()) for front in fronts]  # type: ignore[union-attr]
            assert sum(counts) == 16 and min(counts) > 0, counts
        finally:
            for channel in channels:
                channel.close()


def test_a_second_broker_without_reuse_port_cannot_bind_the_client_port(
    start_broker: Callable[..., BrokerServer],
) -> None:
    first = start_broker(tls_mode="plaintext")
    assert first.client_port is not None and first.client_port.local_port == 0
    with pytest.raises(OSError, match="in use"):
        start_broker(tls_mode="plaintext", port=first.port)
