"""End to end: the official Python client, a real broker and store, and the scheduler.

The client runs in subprocesses (tests/scheduler/clients/timer_client.py); store and broker run
in this process on 127.0.0.1:0 (tests/support/broker_servers.py). The scheduler runs in-process for the
delivery/recall test and as ``python -m services.scheduler`` for the kill -9 test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.scheduler.config import SchedulerConfig
from services.scheduler.service import SchedulerService
from services.store.client.client import GrpcStoreClient
from tests.support.processes import Process
from tests.support.scheduler_e2e import SCHEDULER_READY, delivered, metric
from tests.support.topics import create_topics
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("rocketmq-python-client")

CLIENT = Path(__file__).parent / "clients" / "timer_client.py"
ROOT = Path(__file__).resolve().parents[2]


def client(home: Path, job: dict) -> subprocess.Popen:
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")  # the client logs under ~/logs
    return subprocess.Popen(
        [sys.executable, str(CLIENT), json.dumps(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def results(process: subprocess.Popen, timeout_s: float = 60) -> list[dict]:
    out, err = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, f"client failed:\n{out}\n{err}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def scheduler_store(store_address: str):
    store = GrpcStoreClient(store_address, put_stream=False)
    yield store
    store.close()


def test_delayed_messages_arrive_at_their_time_and_a_recalled_one_never(broker, scheduler_store, tmp_path):
    create_topics(scheduler_store, "Later")
    service = SchedulerService(SchedulerConfig(root=tmp_path / "scheduler"), scheduler_store, watch=scheduler_store)
    service.open()
    service.start()
    try:
        endpoint = f"127.0.0.1:{broker.port}"
        deliver_s = int(time.time()) + 6  # the client takes seconds; recall is possible until 1 s before
        consumer = client(
            tmp_path,
            {
                "mode": "consume",
                "endpoint": endpoint,
                "topic": "Later",
                "group": "LaterGroup",
                "count": 2,
                "deadline_s": 25,
            },
        )
        sender = client(
            tmp_path,
            {
                "mode": "send",
                "endpoint": endpoint,
                "topic": "Later",
                "recall": [1],
                "messages": [
                    {"body": "first", "delivery_timestamp": deliver_s},
                    {"body": "recalled", "delivery_timestamp": deliver_s},
                    {"body": "second", "delivery_timestamp": deliver_s + 1},
                ],
            },
        )
        sent = results(sender)
        assert all(line["ok"] for line in sent[:4]), sent
        assert sent[3] == {"recalled": 1, "ok": True, "message_id": sent[1]["message_id"]}
        received = [line for line in results(consumer) if "message_id" in line]
        assert sorted(line["body"] for line in received) == ["first", "second"], received
        for line in received:  # not consumable before its time
            due_ms = (deliver_s + (line["body"] == "second")) * 1000
            assert line["received_ms"] >= due_ms and line["delivery_timestamp_ms"] == due_ms, line
        records = wait_until(
            lambda: delivered(scheduler_store, "Later"), 10, "2 delivered", accept=lambda r: len(r) >= 2
        )
        assert sorted(r.body for r in records) == [b"first", b"second"]
        assert all(r.store_timestamp_ms >= int(r.properties["TIMER_DELIVER_MS"]) for r in records)
        stats = service.stats().timer
        assert (stats.delivered, stats.recalled, stats.recall_markers) == (2, 1, 1)
    finally:
        service.stop()


def start_scheduler(processes: list[Process], data_dir: Path, store_address: str) -> tuple[Process, re.Match]:
    process = Process(
        [
            sys.executable,
            "-m",
            "services.scheduler",
            "--data-dir",
            str(data_dir),
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
    return process, process.wait_line(SCHEDULER_READY)


def test_kill_9_mid_delivery_loses_nothing_and_is_never_early(
    broker, scheduler_store, store_address, processes, tmp_path
):
    create_topics(scheduler_store, "Crash")
    first, ready = start_scheduler(processes, tmp_path, store_address)
    assert ready["store"] == store_address and ready["data"] == str(tmp_path / "scheduler")
    with grpc.insecure_channel(ready["grpc"]) as channel:
        assert (
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    base_s = int(time.time()) + 4
    count = 80
    sender = client(
        tmp_path,
        {
            "mode": "send",
            "endpoint": f"127.0.0.1:{broker.port}",
            "topic": "Crash",
            "messages": [{"body": f"m{i}", "delivery_timestamp": base_s + i % 4} for i in range(count)],
        },
    )
    sent = results(sender)
    ids = {line["message_id"] for line in sent if line.get("ok") and "message_id" in line}
    assert len(ids) == count, sent
    time.sleep(max(0.0, base_s + 1.5 - time.time()))  # the first slots are out, the last not yet
    first.popen.send_signal(signal.SIGKILL)
    first.popen.wait(10)
    before_restart = {r.properties["UNIQ_KEY"] for r in delivered(scheduler_store, "Crash")}
    assert 0 < len(before_restart) < count
    second, ready = start_scheduler(processes, tmp_path, store_address)
    wait_until(
        lambda: len({r.properties["UNIQ_KEY"] for r in delivered(scheduler_store, "Crash")}) >= count,
        20,
        f"all {count} delivered after the restart",
    )
    records = delivered(scheduler_store, "Crash")
    keys = [r.properties["UNIQ_KEY"] for r in records]
    assert set(keys) == ids
    assert all(r.store_timestamp_ms >= int(r.properties["TIMER_DELIVER_MS"]) for r in records)
    duplicates = len(keys) - len(set(keys))
    assert duplicates <= metric(ready["metrics"], "pyrmq_scheduler_timer_duplicates_total")
    assert second.stop(signal.SIGTERM) == 0
