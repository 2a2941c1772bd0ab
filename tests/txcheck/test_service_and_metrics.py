"""The loop around the checker (waits, health), its metrics, its configuration and its process
entry point's refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from services.broker.transaction import Resolution
from services.txcheck.__main__ import load_config
from services.txcheck.config import TxCheckConfig
from services.txcheck.metrics import TxCheckMetrics
from services.txcheck.model import CheckOutcome
from services.txcheck.service import CheckService
from tests.support.processes import Process
from tests.support.txcheck_world import INTERVAL_MS, TIMEOUT_MS
from tests.support.waits import wait_until


def test_the_loop_waits_an_interval_and_reports_health(world):
    health: list[bool] = []
    checker = world.checker()
    service = CheckService(checker, world.config, on_health=health.append)
    assert service.run_once() == INTERVAL_MS / 1000
    world.store.fail_after = 0
    assert service.run_once() == world.config.retry_after_failure_ms / 1000
    assert not service.healthy and checker.stats().pass_failures == 1
    world.store.fail_after = None
    service.run_once()
    assert health == [True, False, True] and service.healthy


def test_a_cut_short_pass_runs_again_at_once(world):
    for tid in ("A", "B"):
        world.broker.send_half(tid)
    world.advance(TIMEOUT_MS + 1)
    service = CheckService(world.checker(pass_halves_max=1), world.config)
    assert service.run_once() == 0.0
    assert service.run_once() == INTERVAL_MS / 1000


def test_the_loop_thread_starts_and_stops(world):
    service = CheckService(world.checker(), world.config)
    service.start()
    service.stop()


def test_metrics_expose_the_checker_stats(world):
    world.broker.send_half("C")
    world.broker.send_half("NOBODY", topic="Other")
    world.producers.answer = lambda request: Resolution.COMMIT if request.transaction_id == "C" else None
    checker = world.checker()
    world.advance(TIMEOUT_MS + 1)
    world.producers.outcome = CheckOutcome.SENT
    checker.run_once()
    world.advance(INTERVAL_MS)
    world.producers.outcome = CheckOutcome.NO_PRODUCER
    checker.run_once()
    text = generate_latest(TxCheckMetrics(checker.stats).registry).decode()
    for line in (
        "pyrmq_txcheck_checks_sent_total 2.0",
        'pyrmq_txcheck_check_results_total{resolution="commit"} 1.0',
        'pyrmq_txcheck_check_results_total{resolution="unknown"} 1.0',
        'pyrmq_txcheck_check_retries_total{reason="no_producer"} 1.0',
        "pyrmq_txcheck_moved_to_max_time_topic_total 0.0",
        "pyrmq_txcheck_passes_total 2.0",
        "pyrmq_txcheck_half_lag 0.0",
        "pyrmq_txcheck_op_lag 0.0",
    ):
        assert line in text, text


@pytest.mark.parametrize(
    "overrides",
    [
        dict(check_max=0),
        dict(broker_addresses=()),
        dict(port=70000),
        dict(half_retention_ms=1000, transaction_timeout_ms=1000),
    ],
)
def test_bad_configurations_are_refused(overrides):
    with pytest.raises(ValueError):
        TxCheckConfig(**overrides)


def test_command_line():
    config = load_config(
        [
            "--store-address",
            "s:1",
            "--broker-address",
            "b:1,b:2",
            "--broker-address",
            "b:3",
            "--check-interval-ms",
            "500",
        ],
        environ={},
    )
    assert config.broker_addresses == ("b:1", "b:2", "b:3") and config.check_interval_ms == 500
    assert load_config([], environ={}).broker_addresses == ("127.0.0.1:8081",)


def exit_and_log(process: Process) -> tuple[int, str]:
    code = process.popen.wait(30)
    wait_until(
        lambda: process.stderr and process.stderr[-1] is None, 10, "stderr read to its end"
    )  # by the pump thread
    return code, process.log()


def test_the_process_refuses_a_bad_configuration_and_an_absent_store():
    root = Path(__file__).resolve().parents[2]
    code, log = exit_and_log(Process([sys.executable, "-m", "services.txcheck", "--check-max", "0"], root))
    assert code == 2 and "check_max must be positive" in log
    code, log = exit_and_log(
        Process(
            [
                sys.executable,
                "-m",
                "services.txcheck",
                "--store-address",
                "127.0.0.1:1",
                "--store-connect-timeout-ms",
                "300",
                "--port",
                "0",
                "--metrics-port",
                "-1",
            ],
            root,
        )
    )
    assert code == 1 and "not serving" in log
