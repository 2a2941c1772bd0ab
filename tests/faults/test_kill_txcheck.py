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

from tests.faults.checker import History
from tests.faults.workload import seed_from_env
from tests.support.fault_runs import start_cluster
from tests.support.open_transactions import run_open_transactions
from tests.support.processes import Process

pytestmark = pytest.mark.needs("rocketmq-python-client")

COUNT = 5


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

    def kill_txcheck() -> None:
        time.sleep(rng.uniform(0.3, 1.5))  # the kill comes at a random moment of its passes
        cluster.kill("txcheck")
        history.restarted(history.fault("txcheck"))
        cluster.spawn("txcheck")

    run_open_transactions(
        tmp_path,
        cluster,
        history,
        "tests/faults/test_kill_txcheck.py::test_kill_9_txcheck_with_open_transactions",
        COUNT,
        kill_txcheck,
    )
    cluster.stop()
