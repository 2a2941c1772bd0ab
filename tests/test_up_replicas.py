"""``pyrmq up --replicas 3``: a local etcd, three store replicas in controller mode, and the
broker, scheduler and txcheck following the master. A v2 client sends and receives through the
broker; the master is killed (-9) between sends: the next send succeeds on the new master within
the client's deadline, ``up`` restarts the dead replica, which rejoins as a new incarnation (the
kill always costs the old master its role: an election at epoch 2 picks the master, the restarted
replica again if it came back first, since the policy prefers the old master's id on a tie), and
every message sent is received once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from tests.support.cli import run_pyrmq
from tests.support.processes import Process, pyrmq_status, pyrmq_up_command
from tests.support.v2_requests import message, receive, send_ok
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd")

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")


def replicas(etcd: str) -> dict:
    """``pyrmq replica list --json`` of broker-a (run in this process: tests/support/cli.py)."""
    code, out, err = run_pyrmq("replica", "list", "--group", "broker-a", "--etcd-endpoints", etcd, "--json")
    assert code == 0, err
    return json.loads(out)


def pid_listening(address: str) -> int:
    port = address.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"pid=(\d+)", out).group(1))  # type: ignore[union-attr]


def test_a_replica_set_serves_clients_through_a_master_kill(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(pyrmq_up_command(tmp_path / "data", "--replicas", "3", "--create-topic", "TopicTest"), tmp_path)
    processes.append(up)
    ready = up.wait_line(READY)
    line = ready.group(0)
    etcd = re.search(r"\betcd grpc=(\S+)", line).group(1)  # type: ignore[union-attr]
    stores = re.findall(r"\bstore(?:-\d)? grpc=(\S+)", line)
    assert len(stores) == 3
    state = wait_until(  # every slave caught up
        lambda: replicas(etcd), 30, "3 replicas in sync", accept=lambda s: len(s["sync_state_set"]) == 3
    )
    master = state["master_id"]
    assert state["master_epoch"] == 1 and {r["id"] for r in state["replicas"]} == {0, 1, 2}
    with grpc.insecure_channel(ready["clients"]) as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        send_ok(v2, *(message("TopicTest", body=f"before-{i}".encode(), message_id=f"B{i}") for i in range(5)))
        os.kill(pid_listening(stores[master]), signal.SIGKILL)
        killed = time.monotonic()
        send_ok(v2, message("TopicTest", body=b"after", message_id="AFTER"))  # waits for the new master
        failover_s = time.monotonic() - killed
        state = wait_until(  # up restarted the dead replica; an election ran and every replica is in sync again
            lambda: replicas(etcd),
            60,
            "a new master and 3 replicas in sync",
            accept=lambda s: s["master_epoch"] >= 2 and len(s["sync_state_set"]) == 3,
        )
        assert state["master_epoch"] == 2  # one election, whoever won it
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += receive(v2, "TopicTest", group="ReplicaGroup", batch_size=8)[1]
        assert sorted(m.body for m in got) == sorted([f"before-{i}".encode() for i in range(5)] + [b"after"])
    status = pyrmq_status(ready["clients"])
    assert status["store_address"] == stores[state["master_id"]]  # the broker reports the current master
    [group] = status["groups"]
    assert sorted(r["id"] for r in group["replicas"]) == [0, 1, 2]
    assert "restarting it" in up.log()
    assert up.stop(signal.SIGTERM) == 0, up.log()
    print(f"kill -9 of the master -> the next send OK: {failover_s:.2f} s")
