"""``pyrmq up --groups 2`` keeps serving every send through a kill -9 of one group's store (issue
30): up restarts the store (on its port, from its files), the brokers send what was meant for the
down group to the other one meanwhile, ``pyrmq status`` shows the restart, and every message
acknowledged before the kill, broker-b's included, is received after it, each once.
tests/broker/test_groups_down.py and tests/test_up_supervision.py test the parts in-process."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.launcher.up import parse_summary
from services.v2client.client import V2Client, build_message
from tests.support.cli import run_pyrmq
from tests.support.processes import Process, pyrmq_up_command
from tests.support.v2_requests import receive
from tests.support.waits import wait_until

pytestmark = [pytest.mark.needs("etcd"), pytest.mark.timeout(120)]

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
TOPIC = "Survive"
BEFORE, DURING = 20, 100
BATCH = 32


def children(data: Path) -> dict[str, dict]:
    """pyrmq up's supervisor state: label -> pid, state, restarts, ..."""
    return {child["child"]: child for child in json.loads((data / "up-state.json").read_text())["children"]}


def send_all(endpoint: str, batch: str, count: int) -> list[bytes]:
    bodies = [f"{batch}-{i}".encode() for i in range(count)]
    with V2Client(endpoint) as client:
        for body in bodies:
            client.send([build_message(TOPIC, body)])  # BrokerCallError unless OK
    return bodies


def test_a_group_whose_store_is_killed_loses_no_send_and_comes_back(tmp_path: Path, processes: list[Process]) -> None:
    data = tmp_path / "data"
    up = Process(pyrmq_up_command(data, "--groups", "2", "--create-topic", TOPIC), tmp_path)
    processes.append(up)
    ready = up.wait_line(READY)
    endpoint = ready["clients"]
    store_b = parse_summary(ready.group(0))["store-b"]["grpc"]
    before = send_all(endpoint, "before", BEFORE)  # round-robin: half of them on broker-b

    killed = children(data)["store-b"]["pid"]
    os.kill(killed, signal.SIGKILL)
    started = time.monotonic()
    during = send_all(endpoint, "during", DURING)  # each one acknowledged
    took_s = time.monotonic() - started
    assert "trying another group" in up.wait_log("trying another group")  # some were meant for broker-b

    state = wait_until(
        lambda: children(data)["store-b"],
        30,
        "store-b restarted and ready",
        accept=lambda child: child["state"] == "running" and child["restarts"] == 1,
    )
    assert state["pid"] != killed and state["last_exit_code"] == -signal.SIGKILL
    log = up.log()
    assert "store-b exited unexpectedly with code -9; restarting it in 0.5 s (restart 1)" in log
    assert "store-b is ready again" in log

    code, out, err = run_pyrmq(
        "status", "--endpoint", endpoint, "--data-dir", str(data), "--json", "--metrics-port", "-1"
    )
    doc = json.loads(out)
    restarts = {child["child"]: child["restarts"] for child in doc["supervisor"]["children"]}
    assert restarts["store-b"] == 1 and sum(restarts.values()) == 1, restarts
    stores = {s["name"]: (s["address"], s["status"]) for s in doc["services"] if s["name"].startswith("store")}
    assert stores["store (broker-b)"] == (store_b, "SERVING"), (stores, err)  # back on its port

    got: dict[str, list[bytes]] = {"broker-a": [], "broker-b": []}
    with grpc.insecure_channel(endpoint) as channel:
        v2 = s_grpc.MessagingServiceStub(channel)

        pending = set(got)  # groups that may hold more: an empty receive waits out a 5 s poll

        def drained() -> int:
            for group in sorted(pending or got):
                messages = receive(v2, TOPIC, group="Survivors", broker=group, batch_size=BATCH)[1]
                got[group] += [m.body for m in messages]
                if len(messages) < BATCH:  # everything stored long ago: a short batch was the rest
                    pending.discard(group)
            return sum(map(len, got.values()))

        wait_until(drained, 30, "every acknowledged message received", accept=lambda n: n >= BEFORE + DURING)
    assert sorted(got["broker-a"] + got["broker-b"]) == sorted(before + during)  # nothing lost, nothing twice
    assert {b for b in before} & set(got["broker-b"]), "broker-b's messages from before the kill"
    assert up.stop(signal.SIGTERM) == 0, up.log()
    print(f"{DURING} sends during broker-b's restart, all OK, in {took_s:.2f} s")
