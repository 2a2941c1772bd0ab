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

from tests.faults.checker import History
from tests.faults.workload import seed_from_env
from tests.support.etcd import EtcdCluster
from tests.support.fault_runs import start_replica_cluster
from tests.support.open_transactions import run_open_transactions
from tests.support.processes import Process

pytestmark = [pytest.mark.needs("rocketmq-python-client"), pytest.mark.needs("etcd")]

COUNT = 5


def test_open_transactions_are_checked_after_a_master_kill(
    tmp_path: Path, processes: list[Process], etcd_server: EtcdCluster
) -> None:
    history = History(seed_from_env())
    cluster = start_replica_cluster(
        tmp_path,
        processes,
        ",".join(etcd_server.endpoints),
        services=("broker", "txcheck"),
        replicas=2,
        PYRMQ_TXCHECK_TRANSACTION_TIMEOUT_MS="3000",
        PYRMQ_TXCHECK_CHECK_INTERVAL_MS="500",
    )
    cluster.wait_in_sync(timeout_s=20)

    def kill_master() -> None:  # before the 3 s transaction timeout: nothing checked yet
        killed = cluster.kill_master()
        history.restarted(history.fault(f"store-{killed}"))
        cluster.wait_master(timeout_s=15, other_than=killed)
        cluster.spawn(f"store-{killed}")

    run_open_transactions(
        tmp_path,
        cluster,
        history,
        "tests/faults/test_master_kill_transactions.py::test_open_transactions_are_checked_after_a_master_kill",
        COUNT,
        kill_master,
    )
    cluster.stop()
