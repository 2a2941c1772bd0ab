"""``pyrmq up`` supervises (issue 30), one group on ports that were all 0 (any free one): the
store killed with -9 is restarted on the very port it had bound (the broker, told that address
once, keeps using it), then the broker killed with -9 comes back on the client port clients
know. Each restart is logged, in the state file ``pyrmq status`` shows, and in up's own metrics
(``--up-metrics-port``); every message acknowledged before the kills is still there.
tests/test_up_supervision.py drives the supervisor without processes."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from pathlib import Path

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.launcher.up import parse_summary
from tests.support.cli import run_pyrmq
from tests.support.processes import Process, child_pids, pyrmq_up_command
from tests.support.v2_requests import message, receive, send
from tests.support.waits import wait_until

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
TOPIC = "Supervised"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def sent_ok(v2: s_grpc.MessagingServiceStub, body: bytes, index: int) -> bool:
    try:
        reply = send(v2, message(TOPIC, body=body, message_id=f"0102FC0000000146A20B13E206{index:08X}"))
    except grpc.RpcError:
        return False
    return reply.status.code == d.OK


def supervisor_state(data: Path) -> dict[str, dict]:
    doc = json.loads((data / "up-state.json").read_text())
    return {child["child"]: child for child in doc["children"]} | {"": doc}


def test_up_restarts_a_killed_store_and_broker_on_their_ports(tmp_path: Path, processes: list[Process]) -> None:
    data = tmp_path / "data"
    up = Process(pyrmq_up_command(data, "--create-topic", TOPIC, "--up-metrics-port", "0"), tmp_path)
    processes.append(up)
    ready = up.wait_line(READY)
    lines = parse_summary(ready.group(0))
    endpoint = ready["clients"]
    with grpc.insecure_channel(endpoint) as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        assert all(sent_ok(v2, b"before-%d" % i, i) for i in range(5))

        store_pid = child_pids(up.popen.pid)["store"]
        os.kill(store_pid, signal.SIGKILL)
        log = up.wait_log("store is ready again", 30)
        assert "store exited unexpectedly with code -9; restarting it in 0.5 s (restart 1)" in log
        assert child_pids(up.popen.pid)["store"] != store_pid
        # The broker was given the store's address once: the store is back on that port.
        wait_until(lambda: sent_ok(v2, b"after-store", 5), 30, "a send through the restarted store")

        broker_pid = child_pids(up.popen.pid)["broker"]
        os.kill(broker_pid, signal.SIGKILL)
        wait_until(lambda: sent_ok(v2, b"after-broker", 6), 30, "a send through the restarted broker")
        assert "broker exited unexpectedly with code -9; restarting it in 0.5 s (restart 1)" in up.log()

        got: list = []
        wait_until(
            lambda: got.extend(receive(v2, TOPIC, group="Supervised", batch_size=16)[1]) or len(got) >= 7,
            30,
            "every message received",
        )
        assert sorted(m.body for m in got) == sorted(
            [b"before-%d" % i for i in range(5)] + [b"after-store", b"after-broker"]
        )

    state = wait_until(
        lambda: supervisor_state(data), 10, "both running", accept=lambda s: s["broker"]["state"] == "running"
    )
    assert (state["store"]["restarts"], state["store"]["last_exit_code"], state["store"]["state"]) == (1, -9, "running")
    assert (state["broker"]["restarts"], state["scheduler"]["restarts"]) == (1, 0)
    with NO_PROXY.open(state[""]["metrics"], timeout=10) as response:
        metrics = response.read().decode()
    assert 'pyrmq_up_child_restarts_total{child="store"} 1.0' in metrics
    assert 'pyrmq_up_child_restarts_total{child="txcheck"} 0.0' in metrics

    helpers = ("--scheduler", lines["scheduler"]["grpc"], "--txcheck", lines["txcheck"]["grpc"])  # on free ports
    code, out, err = run_pyrmq(
        "status", "--endpoint", endpoint, *helpers, "--data-dir", str(data), "--json", "--metrics-port", "-1"
    )
    assert code == 0, err
    doc = json.loads(out)
    supervised = {c["child"]: c["restarts"] for c in doc["supervisor"]["children"]}
    assert supervised == {"store": 1, "broker": 1, "scheduler": 0, "txcheck": 0}
    assert doc["store_address"] == lines["store"]["grpc"]  # the same address as at start
    assert up.stop(signal.SIGTERM) == 0, up.log()
    assert not (data / "up-state.json").exists()
