"""The service shell: its threads on the real clock, the Prometheus metrics, the process CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest

from services.runtime.clock import SystemClock
from services.scheduler.errors import SchedulerLockedError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.service import SchedulerService
from tests.support.scheduler_timers import park, small_config
from tests.support.store_double import StoreDouble

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
        deadline = time.monotonic() + 10
        while len(store.messages("Live")) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        records = store.messages("Live")
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
