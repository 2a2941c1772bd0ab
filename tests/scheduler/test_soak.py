"""Soak (``-m slow``): timers spread over half a minute while the scheduler process is killed
with SIGKILL every few seconds and restarted (docs/durability.md, T1.11, compressed). Goal: 0 lost,
0 early, every duplicate counted by the restarted schedulers."""

from __future__ import annotations

import random
import signal
import sys
import time
from pathlib import Path

import pytest

from services.domain.contracts.delay import timer_out_ms
from services.domain.names import TIMER_TOPIC
from services.store.client.client import GrpcStoreClient
from services.store.client.model import MessageToPut
from tests.support.processes import Process
from tests.support.scheduler_e2e import SCHEDULER_READY, delivered, metric

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_repeated_kill_9_of_the_scheduler(store_address, processes, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    store = GrpcStoreClient(store_address, put_stream=False)
    count = 20_000
    start_ms = int(time.time() * 1000) + 3_000
    due = {f"S{i:06d}": start_ms + rng.randrange(30_000) for i in range(count)}
    keys = list(due)
    for begin in range(0, count, 500):
        store.put_messages(
            [
                MessageToPut(
                    TIMER_TOPIC,
                    0,
                    b"soak",
                    {
                        "TIMER_DELIVER_MS": str(due[key]),
                        "TIMER_OUT_MS": str(timer_out_ms(due[key], 1000)),
                        "REAL_TOPIC": "Soak",
                        "REAL_QID": str(i % 4),
                        "UNIQ_KEY": key,
                    },
                )
                for i, key in enumerate(keys[begin : begin + 500], begin)
            ],
            allow_system_topics=True,
        )
    duplicates_counted = 0
    end_s = time.time() + 40
    kills = 0
    while time.time() < end_s:
        process = Process(
            [
                sys.executable,
                "-m",
                "services.scheduler",
                "--data-dir",
                str(tmp_path),
                "--store-address",
                store_address,
                "--port",
                "0",
                "--metrics-port",
                "0",
            ],
            ROOT,
        )
        processes.append(process)
        ready = process.wait_line(SCHEDULER_READY)
        time.sleep(rng.uniform(1.0, 4.0))  # the kill comes at a random moment of the run
        duplicates_counted += metric(ready["metrics"], "pyrmq_scheduler_timer_duplicates_total")
        if time.time() > end_s:
            assert process.stop(signal.SIGTERM) == 0
            break
        process.popen.send_signal(signal.SIGKILL)
        process.popen.wait(10)
        kills += 1
    records = delivered(store, "Soak", queues=4)
    seen = [r.properties["UNIQ_KEY"] for r in records]
    assert set(seen) == set(due), f"seed {seed}: lost {len(set(due) - set(seen))}"
    early = [r for r in records if r.store_timestamp_ms < int(r.properties["TIMER_DELIVER_MS"])]
    assert not early, f"seed {seed}: {len(early)} delivered early"
    duplicates = len(seen) - len(set(seen))
    print(f"{kills} kills, {duplicates} duplicates, {duplicates_counted:.0f} counted")
    assert kills >= 5 and duplicates <= duplicates_counted
    store.close()
