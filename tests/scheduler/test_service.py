"""The service shell: its threads on the real clock, the Prometheus metrics, the process CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client import generate_latest

from services.runtime.clock import SystemClock
from services.scheduler.errors import SchedulerLockedError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.service import SchedulerService
from tests.support.scheduler_timers import PRECISION_MS, START_MS, park, run_for, small_config
from tests.support.store_double import StoreDouble
from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_threads_deliver_on_the_real_clock_and_metrics_expose_it(tmp_path):
    clock = SystemClock()
    store = StoreDouble(tmp_path / "store", clock)
    service = SchedulerService(small_config(tmp_path / "scheduler"), store, clock)
    service.open()
    try:
        try:
            SchedulerService(small_config(tmp_path / "scheduler"), store, clock).open()
            raise AssertionError("a second scheduler opened the same directory")
        except SchedulerLockedError:
            pass
        service.start()
        now_ms = clock.now_ms()
        for i in range(20):
            park(store, "Live", now_ms + 300 + 25 * i, f"K{i}")
        records = wait_until(lambda: store.messages("Live"), 10, "20 delivered", accept=lambda r: len(r) >= 20)
        assert len(records) == 20
        assert all(r.store_timestamp_ms >= int(r.properties["TIMER_DELIVER_MS"]) for r in records)
        text = generate_latest(SchedulerMetrics(service.stats).registry).decode()
        for line in (
            "pyrmq_scheduler_timer_enqueued_total 20.0",
            "pyrmq_scheduler_timer_delivered_total 20.0",
            "pyrmq_scheduler_timer_duplicates_total 0.0",
            "pyrmq_scheduler_timer_pending 0.0",
            "pyrmq_scheduler_timer_lateness_seconds_count 20.0",
            'pyrmq_scheduler_delay_lag{level="18"} 0.0',
            "pyrmq_scheduler_delay_delivered_total 0.0",
        ):
            assert line in text, line
    finally:
        service.stop()
        store.close()


def test_process_refuses_bad_configuration_and_an_absent_store(tmp_path):
    bad = subprocess.run(
        [sys.executable, "-m", "services.scheduler", "--data-dir", str(tmp_path), "--delay-levels", "1x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "bad configuration" in bad.stderr
    absent = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.scheduler",
            "--data-dir",
            str(tmp_path),
            "--store-address",
            "127.0.0.1:1",
            "--store-connect-timeout-ms",
            "500",
            "--port",
            "0",
            "--metrics-port",
            "-1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert absent.returncode == 1 and "not serving" in absent.stderr and absent.stdout == ""


def test_rocketmq_timer_gauges_follow_the_wheel(make_service, store_client, clock):
    service = make_service()
    metrics = SchedulerMetrics(service.stats, clock)

    def gauge(name: str) -> float | None:
        return metrics.registry.get_sample_value(name)

    for i in range(3):
        park(store_client, "Soon", START_MS + 2_000, f"S{i}")
    park(store_client, "Later", START_MS + 3_600_000, "L")
    run_for(service, clock, 500)
    assert (gauge("rocketmq_timer_enqueue_lag"), gauge("rocketmq_timer_dequeue_lag")) == (0, 4)
    assert 0 <= gauge("rocketmq_timer_dequeue_latency") < PRECISION_MS  # caught up: within one slot
    run_for(service, clock, 2_000)
    assert gauge("rocketmq_timer_dequeue_lag") == 1 and len(store_client.messages("Soon")) == 3
    park(store_client, "Soon", START_MS + 10_000, "S3")
    clock.advance_ms(10_000)  # the loop stands still: the read pointer falls behind
    assert gauge("rocketmq_timer_dequeue_latency") >= 10_000 - PRECISION_MS  # from its slot's start
    run_for(service, clock, 0)
    assert (gauge("rocketmq_timer_enqueue_lag"), gauge("rocketmq_timer_dequeue_lag")) == (0, 1)
    assert gauge("rocketmq_timer_dequeue_latency") < PRECISION_MS
    assert gauge("rocketmq_timer_dequeue_lag") == gauge("pyrmq_scheduler_timer_pending")
