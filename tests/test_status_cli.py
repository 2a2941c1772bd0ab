"""``pyrmq status`` end to end: a whole cluster started by ``pyrmq up`` on loopback (one for the
module, on free ports placed as topology.py places them, so status finds the scheduler, the
transaction checker and every metrics endpoint by its defaults), messages sent and partly
consumed through MessagingService, then ``services.launcher.cli.main(["status", ...])``."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from pyrmq.store.v1 import store_pb2, store_pb2_grpc
from rich.console import Console

from services.admin import status
from services.launcher import cli
from tests.support.processes import Process, pyrmq_up_command
from tests.support.topics import create_topics_at
from tests.support.v2_requests import ack, message, receive, send_ok
from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]
TOPIC, GROUP = "StatusTopic", "StatusGroup"
SENT = 10
UP_READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")


@dataclass(frozen=True)
class Cluster:
    endpoint: str  # the broker
    store_port: int
    metrics_port: int  # the store's; the others' are beside it
    consumed: int  # of the SENT messages, received and acked by GROUP
    data_dir: Path  # pyrmq up's (its supervisor state: up-state.json)


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports that are free on 127.0.0.1 now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65_535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"no {count} consecutive free ports")


def wait_message_count(endpoint: str, topic: str, count: int) -> None:
    """The store dispatches (fills ConsumeQueues) just after a put returns."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = pb_grpc.AdminStub(channel)

        def counts() -> list[int]:
            topics = stub.GetClusterStatus(pb.GetClusterStatusRequest(), timeout=10).topics
            return [t.message_count for t in topics if t.topic.name == topic]

        wait_until(lambda: counts() == [count], 10, f"{topic} holds {count} messages", describe=counts)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("status")
    while True:  # three blocks, probed one after the other: they must not overlap
        store_port, metrics_port, broker_port = free_ports(5), free_ports(4), free_ports(1)
        taken = [*range(store_port, store_port + 5), *range(metrics_port, metrics_port + 4), broker_port]
        if len(set(taken)) == len(taken):
            break
    up = Process(
        pyrmq_up_command(tmp / "data", port=broker_port, store_port=store_port, metrics_port=metrics_port),
        ROOT,
    )
    try:
        endpoint = up.wait_line(UP_READY)["clients"]
        create_topics_at(endpoint, TOPIC)
        with grpc.insecure_channel(endpoint) as channel:
            v2 = s_grpc.MessagingServiceStub(channel)
            send_ok(v2, *[message(TOPIC, body=b"m%d" % i, message_id=f"STATUS{i:04d}") for i in range(SENT)])
            wait_message_count(endpoint, TOPIC, SENT)
            _, got, _ = receive(v2, TOPIC, group=GROUP, batch_size=4)
            assert 0 < len(got) <= 4
            for m in got:
                assert ack(v2, TOPIC, m.system_properties.receipt_handle, group=GROUP).status.code == 20000
        yield Cluster(endpoint, store_port, metrics_port, len(got), tmp / "data")
        assert up.stop(signal.SIGTERM) == 0, up.log()
    finally:
        up.kill()


def status_args(cluster: Cluster, *extra: str) -> list[str]:
    return [
        "status",
        "--endpoint",
        cluster.endpoint,
        "--metrics-port",
        str(cluster.metrics_port),
        "--timeout",
        "10",
        "--data-dir",
        str(cluster.data_dir),
        *extra,
    ]


def run_status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_every_service_serving_topic_depth_and_group_lag(cluster, capsys):
    code, out, err = run_status(capsys, *status_args(cluster, "--json"))
    assert code == 0, err
    doc = json.loads(out)
    services = {s["name"]: s for s in doc["services"]}
    assert list(services) == ["store", "broker", "scheduler", "txcheck"]
    for _name, service in services.items():
        assert service["status"] == "SERVING" and service["latency_ms"] >= 0, service
        assert service["metrics_reachable"] is True, service
    assert services["store"]["address"] == doc["store_address"] == f"127.0.0.1:{cluster.store_port}"
    supervised = {c["child"]: (c["state"], c["restarts"]) for c in doc["supervisor"]["children"]}
    assert supervised == {name: ("running", 0) for name in services}
    assert services["scheduler"]["address"] == f"127.0.0.1:{cluster.store_port + 4}"
    assert services["txcheck"]["metrics_url"] == f"http://127.0.0.1:{cluster.metrics_port + 3}/metrics"

    [topic] = [t for t in doc["topics"] if t["name"] == TOPIC]
    assert (topic["message_count"], topic["max_offset"], topic["queue_nums"]) == (SENT, SENT, 8)
    assert sum(q["max_offset"] - q["min_offset"] for q in topic["queues"]) == SENT
    assert not any(t["system"] for t in doc["topics"])
    [group] = [g for g in doc["consumer_groups"] if (g["group"], g["topic"]) == (GROUP, TOPIC)]
    assert (group["lag"], group["inflight_messages"]) == (SENT - cluster.consumed, 0)
    assert sum(q["lag"] for q in group["queues"]) == group["lag"]


def test_a_store_without_replication_is_one_master_replica(cluster, capsys):
    code, out, err = run_status(capsys, *status_args(cluster, "--json"))
    assert code == 0, err
    [broker_group] = json.loads(out)["groups"]
    [replica] = broker_group["replicas"]
    assert (replica["id"], replica["role"], replica["in_sync"], replica["lag_bytes"]) == (0, "MASTER", True, 0)
    assert replica["address"] == broker_group["master_address"] and replica["epoch"] == broker_group["master_epoch"]
    assert replica["max_offset"] > 0 and broker_group["sync_state_set"] == [0]
    code, out, _ = run_status(capsys, *status_args(cluster))
    [row] = [line.split() for line in out.splitlines() if line.split()[:2] == ["0", "MASTER"]]
    assert row[-4:] == ["yes", "0", "0.0", "s"] and "Replicas of" in out


def test_all_adds_system_topics(cluster, capsys):
    with grpc.insecure_channel(f"127.0.0.1:{cluster.store_port}") as channel:
        store_pb2_grpc.StoreStub(channel).CreateOrUpdateTopic(
            store_pb2.CreateOrUpdateTopicRequest(
                config=store_pb2.TopicConfig(topic_name="rmq_sys_status_test", read_queue_nums=1, write_queue_nums=1)
            ),
            timeout=10,
        )
    code, out, _ = run_status(capsys, *status_args(cluster, "--json"))
    assert code == 0 and "rmq_sys_status_test" not in [t["name"] for t in json.loads(out)["topics"]]
    code, out, _ = run_status(capsys, *status_args(cluster, "--json", "--all"))
    assert code == 0
    [system] = [t for t in json.loads(out)["topics"] if t["name"] == "rmq_sys_status_test"]
    assert system["system"] and system["message_count"] == 0
    code, out, _ = run_status(capsys, *status_args(cluster, "--all"))
    assert code == 0 and "SYSTEM" in out


def test_table(cluster, capsys):
    code, out, err = run_status(capsys, *status_args(cluster))
    assert code == 0 and err == ""
    assert "Services" in out and "Topics" in out and "Consumer groups" in out
    assert "Supervisor (pyrmq up, pid" in out
    for child in ("store", "broker", "scheduler", "txcheck"):  # each running, never restarted
        [row] = [line.split() for line in out.splitlines() if line.split()[:1] == [child] and "running" in line]
        assert row[2:] == ["running", "0", "-", "-"], row
    assert out.count("SERVING") == 4 and "DOWN" not in out
    [topic_row] = [line.split() for line in out.splitlines() if line.split()[:1] == [TOPIC]]
    assert topic_row == [TOPIC, "MIXED", "8", str(SENT), str(SENT)]
    [group_row] = [line.split() for line in out.splitlines() if line.split()[:2] == [GROUP, TOPIC]]
    assert group_row == [GROUP, TOPIC, str(SENT - cluster.consumed), "0"]


def test_a_service_down_is_exit_4_and_the_rest_still_prints(cluster, capsys):
    closed = f"127.0.0.1:{free_ports(1)}"
    code, out, err = run_status(capsys, *status_args(cluster, "--json", "--txcheck", closed))
    assert code == 4 and err == ""
    doc = json.loads(out)
    states = {s["name"]: s["status"] for s in doc["services"]}
    assert states == {"store": "SERVING", "broker": "SERVING", "scheduler": "SERVING", "txcheck": "DOWN"}
    [txcheck] = [s for s in doc["services"] if s["name"] == "txcheck"]
    assert txcheck["address"] == closed and txcheck["error"].startswith("UNAVAILABLE")
    assert [t["message_count"] for t in doc["topics"] if t["name"] == TOPIC] == [SENT]

    code, out, _ = run_status(capsys, *status_args(cluster, "--txcheck", closed))
    assert code == 4
    assert "DOWN (UNAVAILABLE)" in out and TOPIC in out and GROUP in out


def test_broker_down_still_reports_the_services(cluster, capsys):
    closed = f"127.0.0.1:{free_ports(1)}"
    store = f"127.0.0.1:{cluster.store_port}"
    code, out, err = run_status(
        capsys, "status", "--endpoint", closed, "--store", store, "--metrics-port", "-1", "--json"
    )
    assert code == 4 and err.startswith("pyrmq: error: ") and len(err.splitlines()) == 1
    doc = json.loads(out)
    assert {s["name"]: s["status"] for s in doc["services"]} == {
        "store": "SERVING",
        "broker": "DOWN",
        "scheduler": "SERVING",
        "txcheck": "SERVING",
    }
    assert doc["topics"] is None and doc["consumer_groups"] is None and "UNAVAILABLE" in doc["error"]
    assert all(s["metrics_url"] == "" and s["metrics_reachable"] is None for s in doc["services"])


def test_watch_redraws_until_ctrl_c(cluster, capsys, monkeypatch):
    waits: list[float] = []

    def interrupt(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(status, "_wait", interrupt)
    code, out, _ = run_status(capsys, *status_args(cluster, "--watch", "0.5"))
    assert code == 0 and waits == [0.5, 0.5]
    assert TOPIC in out and "Ctrl-C" in out


def test_watch_and_json_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["status", "--watch", "1", "--json"])
    assert caught.value.code == 2
    assert "--watch" in capsys.readouterr().err


def test_another_groups_store_metrics_sit_as_far_from_the_home_stores_as_its_port():
    """pyrmq up --groups puts group k's ports (metrics too) 100 k above the first group's;
    the compose file runs each group's stores on the same ports on hosts of their own."""
    ns = argparse.Namespace(endpoint="127.0.0.1:8081", metrics_port=9101)
    addresses = status.service_addresses(
        argparse.Namespace(endpoint="127.0.0.1:8081", store=None, scheduler=None, txcheck=None, metrics_port=9101),
        "127.0.0.1:10911",
    )
    addresses |= {"store (broker-b)": "127.0.0.1:11011", "store (broker-c)": "store-c-0:10911"}
    urls = status.metrics_urls(ns, addresses)
    assert urls["store"] == "http://127.0.0.1:9101/metrics"
    assert urls["store (broker-b)"] == "http://127.0.0.1:9201/metrics"
    assert urls["store (broker-c)"] == "http://store-c-0:9101/metrics"
    assert status.metrics_urls(argparse.Namespace(endpoint="127.0.0.1:8081", metrics_port=-1), addresses) == {
        name: "" for name in addresses
    }


def test_the_supervisor_table_reads_a_running_ups_state_file_only(tmp_path: Path) -> None:
    path = tmp_path / "up-state.json"
    child = {"child": "store-b", "pid": 7, "state": "restarting", "restarts": 2, "last_exit_code": -9}
    path.write_text(json.dumps({"up_pid": os.getpid(), "metrics": "", "children": [{**child, "last_restart_ms": 0}]}))
    doc = status.read_supervisor(path)
    assert doc is not None and doc["children"][0]["restarts"] == 2
    report = status.Report([], "", None, None, "", 0, supervisor=doc)
    console = Console(width=200, file=io.StringIO())
    console.print(status.render(report))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"Supervisor (pyrmq up, pid {os.getpid()})" in out
    [row] = [line.split() for line in out.splitlines() if line.split()[:1] == ["store-b"]]
    assert row == ["store-b", "7", "restarting", "2", "-9", "-"]
    path.write_text(json.dumps({"up_pid": _exited_pid(), "children": []}))  # a killed up's file: stale
    assert status.read_supervisor(path) is None
    path.write_text("{not json")
    assert status.read_supervisor(path) is None
    assert status.read_supervisor(tmp_path / "missing.json") is None


def _exited_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
