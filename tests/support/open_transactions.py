"""A fault run with open transactions (tests/faults/test_kill_txcheck.py and
test_master_kill_transactions.py): the official Python client (tests/broker/clients/send.py,
"transaction": "open") sends half messages it never commits by itself and answers COMMIT only
when the server checks; a one-consumer workload receives what gets committed; ``finish`` checks
that every transaction was checked, committed and delivered once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.faults.checker import OK, History, make_body
from tests.faults.cluster import Cluster
from tests.faults.workload import Workload, WorkloadConfig
from tests.support.official_client import Client

TOPIC, GROUP = "FaultsTx", "FaultsTxGroup"
DRAIN_TIMEOUT_S = 40.0


def run_open_transactions(
    tmp_path: Path, cluster: Cluster, history: History, test_id: str, count: int, fault: Callable[[], None]
) -> None:
    """Send ``count`` open transactions, run ``fault`` (a kill and restart), then drain and
    assert: each acked, checked, committed and delivered once; nothing lost or corrupt."""
    cluster.create_topic(TOPIC, "TRANSACTION")
    cluster.create_group(GROUP)
    bodies = {f"tx-{n}": make_body(f"tx-{n}", history.seed) for n in range(count)}
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
    repro = workload.repro(test_id)
    print(repro)
    try:
        for n, (_key, body) in enumerate(bodies.items()):
            send = history.invoke("tx", n, TOPIC, body)
            line = client.next_line("ok")
            history.complete(send, OK if line["ok"] else "info", line.get("message", ""), line.get("message_id", ""))
        fault()
        workload._consumers.append(workload._thread(workload._consume, "c0", TOPIC, GROUP))
        drained = workload.drain(DRAIN_TIMEOUT_S)
    finally:
        workload.stop()
        client.stop()
    report = history.check()
    print(report.summary())
    problems = report.describe()
    assert report.acked == count, f"{repro}\n{problems}"
    assert not report.violations(), f"{repro}\n{problems}\n{cluster.logs()}"
    assert drained, f"{repro}\nnot drained in {DRAIN_TIMEOUT_S} s: {problems}\n{cluster.logs()}"
    assert not report.duplicates_by_body, f"{repro}\ncommitted twice: {report.duplicates_by_body}"
