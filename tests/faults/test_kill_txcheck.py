"""kill -9 of TXCHECK with half messages pending whose producer never commits by itself: the
official Python client (tests/broker/clients/send.py, "transaction": "open") leaves them open
and answers COMMIT only when the server checks. txcheck runs with a 1 s transaction timeout and
a 0.5 s interval; it is killed 0.3-1.5 s after the sends and restarted.

Asserts: after the restart every open transaction is still checked and committed, so each
message is delivered through the broker (0 lost), none twice as a new stored copy
(``duplicates_by_body``), 0 corrupt / unexpected.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.faults.checker import OK, History, make_body
from tests.faults.workload import Workload, WorkloadConfig, seed_from_env
from tests.support.fault_runs import start_cluster
from tests.support.official_client import Client
from tests.support.processes import Process

pytestmark = pytest.mark.needs("rocketmq-python-client")

TOPIC, GROUP = "FaultsTx", "FaultsTxGroup"
COUNT = 5
DRAIN_TIMEOUT_S = 40.0


def test_kill_9_txcheck_with_open_transactions(tmp_path: Path, processes: list[Process]) -> None:
    seed = seed_from_env()
    rng = random.Random(f"{seed}/faults")
    history = History(seed)
    cluster = start_cluster(
        tmp_path,
        processes,
        services=("store", "broker", "txcheck"),
        extra_args={"txcheck": ["--transaction-timeout-ms", "1000", "--check-interval-ms", "500"]},
    )
    cluster.create_topic(TOPIC, "TRANSACTION")
    cluster.create_group(GROUP)
    bodies = {f"tx-{n}": make_body(f"tx-{n}", seed) for n in range(COUNT)}
    client = Client(
        tmp_path / "producer",
        {
            "endpoint": cluster.endpoint,
            "topics": [TOPIC],
            "checker": "commit",
            "linger_s": 60,
            "messages": [
                {"topic": TOPIC, "body": body.decode(), "keys": [key], "transaction": "open"}
                for key, body in bodies.items()
            ],
        },
    )
    workload = Workload(
        cluster.endpoint,
        history,
        WorkloadConfig(topic=TOPIC, group=GROUP, producers=0, consumers=1, receive_wait_s=5.0),
    )
    repro = workload.repro("tests/faults/test_kill_txcheck.py::test_kill_9_txcheck_with_open_transactions")
    print(repro)
    try:
        for n, (_key, body) in enumerate(bodies.items()):
            send = history.invoke("tx", n, TOPIC, body)
            line = client.next_line("ok")
            history.complete(send, OK if line["ok"] else "info", line.get("message", ""), line.get("message_id", ""))
        time.sleep(rng.uniform(0.3, 1.5))
        cluster.kill("txcheck")
        history.restarted(history.fault("txcheck"))
        cluster.spawn("txcheck")
        workload._consumers.append(workload._thread(workload._consume, "c0", TOPIC, GROUP))
        drained = workload.drain(DRAIN_TIMEOUT_S)
    finally:
        workload.stop()
        client.stop()
    report = history.check()
    print(report.summary())
    problems = report.describe()
    assert report.acked == COUNT, f"{repro}\n{problems}"
    assert not report.violations(), f"{repro}\n{problems}\n{cluster.logs()}"
    assert drained, f"{repro}\nnot drained in {DRAIN_TIMEOUT_S} s: {problems}\n{cluster.logs()}"
    assert not report.duplicates_by_body, f"{repro}\ncommitted twice: {report.duplicates_by_body}"
    cluster.stop()
