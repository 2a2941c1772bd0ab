"""``python -m services.broker`` and ``pyrmq up`` as real processes, driven by the official client."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.launcher.up import create_missing_topics
from services.runtime.rpc.tls import TlsFiles
from services.store.client.client import GrpcStoreClient
from services.store.client.model import TopicInfo
from tests.support.official_client import run_client
from tests.support.processes import UP_READY, Process, broker_command, child_pids, pyrmq_up_command, start_store
from tests.support.store_reads import wait_stored
from tests.support.topics import create_topics_at
from tests.support.v2_requests import METADATA
from tests.support.waits import wait_until

BROKER_READY = re.compile(
    r"^pyrmq-broker ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+) store=(?P<store>\S+) endpoint=(?P<endpoint>\S+) tls=(?P<tls>\S+) cert=(?P<cert>\S+)$"
)


def test_broker_process_serves_and_stops_cleanly(tmp_path: Path, processes: list[Process]) -> None:
    _, store_ready = start_store(processes, tmp_path / "data", tmp_path)
    broker = Process(broker_command(store_ready["grpc"], metrics_port=0), tmp_path)
    processes.append(broker)
    ready = broker.wait_line(BROKER_READY)
    assert ready["store"] == store_ready["grpc"] and ready["endpoint"] == ready["grpc"]
    assert (ready["tls"], ready["cert"]) == ("both", "memory")  # no data_dir: a new certificate in memory
    with grpc.insecure_channel(ready["grpc"]) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="apache.rocketmq.v2.MessagingService"), timeout=10
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        route = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=METADATA, timeout=10
        )
        assert route.status.code == d.TOPIC_NOT_FOUND  # auto-create is off by default
        create_topics_at(ready["grpc"], "T")  # as `pyrmq topic create` does
        route = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=METADATA, timeout=10
        )
        assert route.status.code == d.OK and len(route.message_queues) == 8
    assert broker.stop(signal.SIGTERM) == 0, broker.log()
    assert "broker stopped" in broker.log()


def test_broker_process_fails_without_a_store(tmp_path: Path, processes: list[Process]) -> None:
    broker = Process(
        [
            sys.executable,
            "-m",
            "services.broker",
            "--port",
            "0",
            "--remoting-port",
            "-1",
            "--store-address",
            "127.0.0.1:1",
            "--metrics-port",
            "-1",
            "--store-connect-timeout-ms",
            "1500",
        ],
        tmp_path,
    )
    processes.append(broker)
    assert broker.popen.wait(60) == 1
    assert broker.lines.get(timeout=10) is None  # stdout closed without a ready line
    assert "not serving after" in broker.wait_log("not serving after")


@pytest.mark.needs("rocketmq-python-client")
def test_pyrmq_up_starts_store_then_broker_and_the_client_sends(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(
        pyrmq_up_command(tmp_path / "data", "--create-topic", "UpTopic"),  # as `make run` creates TopicTest
        tmp_path,
    )
    processes.append(up)
    ready = up.wait_line(UP_READY)
    assert ready["broker_store"] == ready["store"] and ready["clients"] == ready["endpoint"]
    assert ready["endpoint"].startswith("127.0.0.1:")
    [result], _ = run_client(
        tmp_path,
        ready["clients"],
        [{"topic": "UpTopic", "body": "through pyrmq up", "keys": ["up-1"]}],
        topics=("UpTopic",),
    )
    assert result["ok"], result
    with grpc.insecure_channel(ready["store"]) as channel:
        [record] = wait_stored(pb_grpc.StoreStub(channel), "UpTopic", "up-1")
    assert record.body == b"through pyrmq up"
    assert up.stop(signal.SIGINT) == 0, up.log()
    assert "[broker]" not in up.log() and "[store]" not in up.log()  # children print only their ready lines
    assert "created topic UpTopic (MIXED, 8 queues)" in up.log()


def test_up_creates_only_the_topics_that_are_missing(store_address: str, topics) -> None:
    topics("Kept", message_type="FIFO", queue_nums=2)
    create_missing_topics(store_address, TlsFiles("", "", ""), ["Kept", "New"])
    store = GrpcStoreClient(store_address)
    try:
        assert store.get_topic("Kept") == TopicInfo("Kept", 2, 2, 6, "FIFO")  # an operator's topic is left alone
        assert store.get_topic("New") == TopicInfo("New", 8, 8, 6, "MIXED")
    finally:
        store.close()


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _start_up(tmp_path: Path, processes: list[Process], *extra: str) -> Process:
    up = Process(
        pyrmq_up_command(tmp_path / "data", *extra),
        tmp_path,
    )
    processes.append(up)
    up.wait_line(UP_READY)
    return up


def test_pyrmq_up_stops_the_broker_when_the_store_dies(tmp_path: Path, processes: list[Process]) -> None:
    """Without supervision (--restart-limit 0; by default up restarts it: tests/test_up_supervise.py)."""
    up = _start_up(tmp_path, processes, "--restart-limit", "0")
    children = child_pids(up.popen.pid)
    assert set(children) == {"store", "broker", "scheduler", "txcheck"}
    os.kill(children["store"], signal.SIGKILL)
    assert up.popen.wait(60) != 0
    assert "store exited unexpectedly" in up.log()
    assert _gone(children["broker"])


def test_children_stop_when_pyrmq_up_is_killed(tmp_path: Path, processes: list[Process]) -> None:
    up = _start_up(tmp_path, processes)
    children = child_pids(up.popen.pid)
    os.kill(up.popen.pid, signal.SIGKILL)
    up.popen.wait(60)
    wait_until(lambda: all(_gone(pid) for pid in children.values()), 60, "every child gone")
