"""``pyrmq up --groups 2 --brokers 2`` (issue 17): a local etcd, two broker groups (broker-a,
broker-b: each its store, scheduler and txcheck), and two broker processes sharing the one client
port (and the one remoting port: broker-b's queues have a remoting port of their own on both).
``--create-topic`` spreads the topic over both groups; sends through either broker land
on both groups' queues and every message is received once; each txcheck reaches both brokers
at their own loopback ports."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.domain.remoting.codes import RequestCode
from services.launcher.up import parse_summary
from tests.support.cli import run_pyrmq
from tests.support.processes import Process, pyrmq_up_command
from tests.support.remoting_client import RemotingTestClient
from tests.support.v2_requests import message, receive, send_ok

pytestmark = pytest.mark.needs("etcd")

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
LABELS = ["etcd", "store", "store-b", "broker", "broker-1", "scheduler", "txcheck", "scheduler-b", "txcheck-b"]


def test_two_groups_and_two_brokers_on_one_port(tmp_path: Path, processes: list[Process]) -> None:
    data = tmp_path / "data"
    up = Process(
        pyrmq_up_command(data, "--groups", "2", "--brokers", "2", "--create-topic", "Spread", remoting_port=0),
        tmp_path,
    )
    processes.append(up)
    ready = up.wait_line(READY)
    lines = parse_summary(ready.group(0))
    assert list(lines) == LABELS
    assert lines["broker"]["grpc"] == lines["broker-1"]["grpc"]  # one client port
    locals_ = [lines["broker"]["local"], lines["broker-1"]["local"]]
    assert len(set(locals_)) == 2
    for helper in ("txcheck", "txcheck-b"):  # each reaches every broker
        assert lines[helper]["broker"].split(",") == locals_
    assert lines["store"]["data"] != lines["store-b"]["data"] and (data / "broker-b").is_dir()
    assert "replica set:      broker-b" in up.wait_line(re.compile(r"^  replica set: +broker-b")).group(0)
    # One remoting port for both brokers, the first group's; broker-b's queues on a port of their own.
    namesrv = lines["broker"]["remoting"]
    assert lines["broker-1"]["remoting"] == namesrv
    with RemotingTestClient(namesrv) as client:
        route = json.loads(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Spread"}).body)
    addresses = {broker["brokerName"]: broker["brokerAddrs"]["0"] for broker in route["brokerDatas"]}
    assert addresses["broker-a"] == namesrv and addresses["broker-b"] not in (namesrv, "")

    bodies = [f"m-{i}".encode() for i in range(40)]
    addresses = [ready["clients"], *locals_]
    for i, body in enumerate(bodies):  # through the shared port and each broker's own
        with grpc.insecure_channel(addresses[i % 3]) as channel:
            send_ok(s_grpc.MessagingServiceStub(channel), message("Spread", body=body, message_id=f"M{i:02d}"))
    got: dict[str, list[bytes]] = {"broker-a": [], "broker-b": []}
    with grpc.insecure_channel(locals_[1]) as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < len(bodies) and time.monotonic() < deadline:
            for group in got:
                _, messages, _ = receive(v2, "Spread", group="UpGroups", broker=group, polling_s=1)
                got[group] += [m.body for m in messages]
    assert sorted(got["broker-a"] + got["broker-b"]) == sorted(bodies)
    assert got["broker-a"] and got["broker-b"], {group: len(bodies) for group, bodies in got.items()}

    # pyrmq status covers both groups: each one's replicas, the topic's queues in both, both stores' health.
    status = json.loads(run_pyrmq("status", "--endpoint", ready["clients"], "--json", "--metrics-port", "-1")[1])
    assert [group["name"] for group in status["groups"]] == ["broker-a", "broker-b"]
    assert all(group["replicas"] for group in status["groups"])
    [spread] = [topic for topic in status["topics"] if topic["name"] == "Spread"]
    assert spread["broker_groups"] == ["broker-a", "broker-b"] and spread["message_count"] == len(bodies)
    stores = {
        service["name"]: service["status"] for service in status["services"] if service["name"].startswith("store")
    }
    assert stores == {"store": "SERVING", "store (broker-b)": "SERVING"}
    # Each store's metrics carry its group (node_id, as RocketMQ's broker metrics do).
    with urllib.request.urlopen(lines["store-b"]["metrics"], timeout=10) as response:
        assert 'node_id="broker-b"' in response.read().decode()
    assert up.stop(signal.SIGTERM) == 0, up.log()
