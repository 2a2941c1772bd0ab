"""kill -9 of the SCHEDULER with timer (DELAY) messages pending, delivery 2-5 s ahead; restarted
at once (store and broker stay up).

Asserts: every acked delayed message is delivered after the restart (0 lost), none before its
delivery time (``early``: the consumer's receive time is compared with the send's delivery
timestamp, same host clock), 0 corrupt / unexpected; duplicates are counted and at most one
delivery batch (256, services/scheduler/README.md "Crash safety").
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.faults.checker import History
from tests.faults.workload import Workload, WorkloadConfig, seed_from_env
from tests.support.fault_runs import DRAIN_TIMEOUT_S, check_run, start_cluster, wait_first_ok
from tests.support.processes import Process

DELIVERY_BATCH = 256


def kill_scheduler_cycles(tmp_path: Path, processes: list[Process], test_id: str, cycles: int) -> None:
    seed = seed_from_env()
    rng = random.Random(f"{seed}/faults")
    history = History(seed)
    cluster = start_cluster(tmp_path, processes, services=("store", "broker", "scheduler"))
    cluster.create_topic("FaultsDelay", "DELAY")
    cluster.create_group("FaultsDelayGroup")
    config = WorkloadConfig(
        topic="FaultsDelay",
        group="FaultsDelayGroup",
        producers=2,
        consumers=2,
        delay_s=(2.0, 5.0),
        send_pause_s=(0.005, 0.03),
    )
    workload = Workload(cluster.endpoint, history, config).start()
    repro = workload.repro(test_id)
    print(repro)
    try:
        wait_first_ok(history, 0.0)
        for cycle in range(cycles):
            time.sleep(rng.uniform(1.0, 2.5))  # the kill comes at a random moment of the load
            cluster.kill("scheduler")
            fault = history.fault(f"scheduler#{cycle}")
            pending = sum(
                1
                for s in list(history.sends.values())
                if s.outcome == "ok" and s.deliver_at_ms and s.deliver_at_ms > time.time() * 1000
            )
            assert pending, "nothing was pending at the kill"
            time.sleep(rng.uniform(0.0, 1.0))  # down a random while: timers fall due meanwhile
            history.restarted(fault)
            cluster.spawn("scheduler")
        time.sleep(1.0)  # a last second of load after the restart
        workload.stop_sending()
        drained = workload.drain(DRAIN_TIMEOUT_S)
    finally:
        workload.stop()
    report, problems = check_run(history, workload, cluster, repro)
    assert drained, f"{repro}\nnot drained in {DRAIN_TIMEOUT_S} s: {problems}"
    extra = sum(report.duplicates_by_id.values())
    assert extra <= DELIVERY_BATCH * cycles, f"{repro}\n{extra} duplicate deliveries: {problems}"
    assert report.acked > 0
    cluster.stop()


def test_kill_9_scheduler_with_timers_pending(tmp_path: Path, processes: list[Process]) -> None:
    kill_scheduler_cycles(
        tmp_path, processes, "tests/faults/test_kill_scheduler.py::test_kill_9_scheduler_with_timers_pending", 1
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_scheduler_soak(tmp_path: Path, processes: list[Process]) -> None:
    kill_scheduler_cycles(tmp_path, processes, "tests/faults/test_kill_scheduler.py::test_kill_9_scheduler_soak", 10)
