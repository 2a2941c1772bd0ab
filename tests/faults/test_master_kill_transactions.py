"""kill -9 of the store MASTER with open transactions: the official Python client sends half
messages it never commits by itself ("transaction": "open") and answers COMMIT only when the
server checks. The half messages are on every replica (SYNC all-ack); the master is killed
before txcheck (1 s transaction timeout, 0.5 s interval) has checked them; txcheck follows the
new master, its check offsets replicated as consumer offsets, and checks every transaction.

Asserts: each message is delivered through the broker once committed (0 lost), none committed
twice as a new stored copy (``duplicates_by_body``), 0 corrupt / unexpected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.checker import OK, History, make_body
from tests.faults.workload import Workload, WorkloadConfig, seed_from_env
from tests.support.etcd import EtcdCluster
from tests.support.fault_runs import start_replica_cluster
from tests.support.official_client import Client
from tests.support.processes import Process

pytestmark = [pytest.mark.needs("rocketmq-python-client"), pytest.mark.needs("etcd")]

TOPIC, GROUP = "FaultsTx", "FaultsTxGroup"
COUNT = 5
DRAIN_TIMEOUT_S = 40.0


def test_open_transactions_are_checked_after_a_master_kill(
    tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster
) -> None:
    seed = seed_from_env()
    history = History(seed)
    cluster = start_replica_cluster(
        tmp_path,
        processes,
        ",".join(etcd_server.endpoints),
        services=("broker", "txcheck"),
        replicas=2,
        PYRMQ_TXCHECK_TRANSACTION_TIMEOUT_MS="3000",
        PYRMQ_TXCHECK_CHECK_INTERVAL_MS="500",
    )
    cluster.create_topic(TOPIC, "TRANSACTION")
    cluster.create_group(GROUP)
    cluster.wait_in_sync(timeout_s=20)
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
    repro = workload.repro(
        "tests/faults/test_master_kill_transactions.py::test_open_transactions_are_checked_after_a_master_kill"
    )
    print(repro)
    try:
        for n, (_key, body) in enumerate(bodies.items()):
            send = history.invoke("tx", n, TOPIC, body)
            line = client.next_line("ok")
            history.complete(send, OK if line["ok"] else "info", line.get("message", ""), line.get("message_id", ""))
        killed = cluster.kill_master()  # before the 3 s transaction timeout: nothing checked yet
        history.restarted(history.fault(f"store-{killed}"))
        cluster.wait_master(timeout_s=15, other_than=killed)
        cluster.spawn(f"store-{killed}")
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
