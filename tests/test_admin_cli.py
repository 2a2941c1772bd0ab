"""The admin commands end to end: ``pyrmq topic|group|consumer|message ...`` (services/launcher/cli.py
``main``, run in this process: tests/support/cli.py; one test runs ``python -m
services.launcher.cli`` as a subprocess) against a real broker and store (in this process, on
127.0.0.1:0; one pair for the module, so each test uses its own names)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.broker.__main__ import build_broker
from services.broker.config import BrokerConfig
from services.runtime.clock import SystemClock
from services.store.client.client import GrpcStoreClient
from services.store.rpc.server import build_server as build_store_server
from services.store.rpc.server import stop_server
from services.store.store import FileStore
from tests.support.admin_messages import put, wait_indexed
from tests.support.cli import pyrmq
from tests.support.filestore import small_config

ROOT = Path(__file__).resolve().parents[1]
CLI_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pb_grpc.StoreStub]]:
    """(broker endpoint, store stub)."""
    store = FileStore(
        small_config(tmp_path_factory.mktemp("admin-cli") / "store", commitlog_file_size_bytes=64 << 20), SystemClock()
    )
    store.start()
    store_server, store_port = build_store_server(store, "127.0.0.1", 0)
    store_server.start()
    client = GrpcStoreClient(f"127.0.0.1:{store_port}")
    broker = build_broker(BrokerConfig(port=0, store_address=f"127.0.0.1:{store_port}"), client)
    broker.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{store_port}") as channel:
            yield f"127.0.0.1:{broker.port}", pb_grpc.StoreStub(channel)
    finally:
        broker.stop(1.0)
        client.close()
        stop_server(store_server, 1.0)
        store.shutdown()


@pytest.fixture
def endpoint(servers) -> str:
    return servers[0]


@pytest.fixture
def store_stub(servers) -> pb_grpc.StoreStub:
    return servers[1]


def pyrmq_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m services.launcher.cli ARGS``: the command line as a program."""
    return subprocess.run(
        [sys.executable, "-m", "services.launcher.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def ok(*args: str) -> str:
    done = pyrmq(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ok_json(*args: str):
    return json.loads(ok(*args, "--json"))


def fails(code: int, *args: str, run=pyrmq) -> str:
    """The one-line error on stderr of a command that must exit with ``code``."""
    done = run(*args)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 or code == 2, done.stderr  # 2: argparse adds its usage
    return done.stderr


def test_topic_create_list_delete(endpoint):
    assert (
        ok("topic", "create", "CliOrders", "--type", "fifo", "--queues", "4", "--endpoint", endpoint)
        == "Created topic CliOrders: FIFO, 4 queues.\n"
    )
    again = ok_json("topic", "create", "CliOrders", "--type", "TRANSACTION", "--endpoint", endpoint)
    assert again == {
        "created": False,
        "topic": {
            "name": "CliOrders",
            "message_type": "TRANSACTION",
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 6,
            "system": False,
            "broker_groups": ["broker-a"],
            "attributes": {},
        },
    }
    table = ok("topic", "list", "--endpoint", endpoint)
    assert "TOPIC" in table and "TYPE" in table
    [row] = [line.split() for line in table.splitlines() if "CliOrders" in line]
    assert row == ["CliOrders", "TRANSACTION", "4", "4", "read-write", "broker-a"]
    topics = ok_json("topic", "list", "--endpoint", endpoint)["topics"]
    assert "CliOrders" in [t["name"] for t in topics]

    assert ok("topic", "delete", "CliOrders", "--endpoint", endpoint) == "Deleted topic CliOrders.\n"
    assert "CliOrders" not in [t["name"] for t in ok_json("topic", "list", "--endpoint", endpoint)["topics"]]
    assert (
        fails(3, "topic", "delete", "CliOrders", "--endpoint", endpoint)
        == "pyrmq: error: topic CliOrders does not exist\n"
    )


def test_lite_topics_take_an_expiration(endpoint):
    assert (
        ok(
            "topic",
            "create",
            "CliLite",
            "--type",
            "LITE",
            "--queues",
            "4",
            "--lite-expiration",
            "60",
            "--endpoint",
            endpoint,
        )
        == "Created topic CliLite: LITE, 4 queues (idle lite topics expire after 60 min).\n"
    )
    created = ok_json("topic", "update", "CliLite", "--lite-expiration", "-1", "--endpoint", endpoint)["topic"]
    assert (created["message_type"], created["lite_expiration_minutes"]) == ("LITE", -1)
    assert created["attributes"] == {"lite.topic.expiration": "-1"}
    plain = ok_json("topic", "create", "CliLite2", "--type", "LITE", "--endpoint", endpoint)["topic"]
    assert plain["lite_expiration_minutes"] == -1 and plain["attributes"] == {}  # never, RocketMQ's default
    error = fails(2, "topic", "create", "CliBad", "--type", "NORMAL", "--lite-expiration", "60", "--endpoint", endpoint)
    assert "--lite-expiration is for --type LITE topics, not NORMAL" in error
    assert "-1 (never) or 1-43200 minutes" in fails(
        2, "topic", "create", "CliBad", "--type", "LITE", "--lite-expiration", "50000", "--endpoint", endpoint
    )


def test_priority_topics_have_a_queue_per_level(endpoint):
    assert (
        ok("topic", "create", "CliUrgent", "--type", "priority", "--endpoint", endpoint)
        == "Created topic CliUrgent: PRIORITY, 10 queues (priorities 0-9).\n"
    )
    assert (
        ok("topic", "create", "CliUrgent4", "--type", "PRIORITY", "--max-priority", "3", "--endpoint", endpoint)
        == "Created topic CliUrgent4: PRIORITY, 4 queues (priorities 0-3).\n"
    )
    updated = ok_json("topic", "update", "CliUrgent4", "--max-priority", "5", "--endpoint", endpoint)["topic"]
    assert (updated["message_type"], updated["write_queue_nums"], updated["max_priority"]) == ("PRIORITY", 6, 5)
    [row] = [
        line.split() for line in ok("topic", "list", "--endpoint", endpoint).splitlines() if "CliUrgent " in line + " "
    ]
    assert row[:4] == ["CliUrgent", "PRIORITY", "10", "10"]
    error = fails(2, "topic", "create", "CliBad", "--type", "NORMAL", "--max-priority", "3", "--endpoint", endpoint)
    assert "--max-priority is for --type PRIORITY topics, not NORMAL" in error
    error = fails(
        2,
        "topic",
        "create",
        "CliBad",
        "--type",
        "PRIORITY",
        "--max-priority",
        "3",
        "--queues",
        "8",
        "--endpoint",
        endpoint,
    )
    assert "--max-priority 3 means 4 queues, not --queues 8" in error
    assert "must be at least 0" in fails(
        2, "topic", "create", "CliBad", "--type", "PRIORITY", "--max-priority", "-1", "--endpoint", endpoint
    )
    # One queue is one level: every priority would be delivered in arrival order.
    error = fails(2, "topic", "create", "CliBad", "--type", "PRIORITY", "--queues", "1", "--endpoint", endpoint)
    assert "--queues 1 gives it one level" in error and "2 queues or more" in error
    error = fails(2, "topic", "create", "CliBad", "--type", "PRIORITY", "--max-priority", "0", "--endpoint", endpoint)
    assert "--max-priority 0 gives a PRIORITY topic one level" in error
    assert "CliBad" not in ok("topic", "list", "--endpoint", endpoint)
    created = ok_json("topic", "create", "CliUrgent2", "--type", "PRIORITY", "--queues", "2", "--endpoint", endpoint)
    assert created["topic"]["max_priority"] == 1


def test_bad_topic_name_is_exit_2_with_the_reason(endpoint):
    error = fails(2, "topic", "create", "bad/name", "--type", "NORMAL", "--endpoint", endpoint)
    assert error.startswith("pyrmq: error: The specified topic: bad/name, contains illegal characters")
    assert "system topic" in fails(2, "topic", "create", "TBW102", "--type", "NORMAL", "--endpoint", endpoint)


def test_group_create_and_list(endpoint):
    assert (
        ok("group", "create", "CliGroup", "--fifo", "--max-delivery-attempts", "5", "--endpoint", endpoint)
        == "Created group CliGroup: FIFO, 5 delivery attempts before the DLQ, retry policy default.\n"
    )
    default = {"kind": "default"}
    assert ok_json("group", "create", "CliGroup", "--endpoint", endpoint) == {
        "created": False,
        "group": {
            "name": "CliGroup",
            "fifo": True,
            "max_delivery_attempts": 5,
            "system": False,
            "retry_policy": default,
            "attributes": {},
        },
    }
    [row] = [line.split() for line in ok("group", "list", "--endpoint", endpoint).splitlines() if "CliGroup" in line]
    assert row == ["CliGroup", "yes", "5", "default"]
    groups = ok_json("group", "list", "--endpoint", endpoint)["groups"]
    assert {
        "name": "CliGroup",
        "fifo": True,
        "max_delivery_attempts": 5,
        "system": False,
        "retry_policy": default,
        "attributes": {},
    } in groups
    assert "illegal characters" in fails(2, "group", "create", "bad group", "--endpoint", endpoint)


def test_group_attributes(endpoint):
    """RocketMQ's group attributes (mqadmin updateSubGroup -a): set, kept when not named, removed;
    an unknown name or a bad value is refused with the reason (exit 2)."""
    created = ok_json(
        "group",
        "create",
        "LiteCliGroup",
        "--attribute",
        "lite.bind.topic=LiteParent",
        "--attribute",
        "lite.sub.model=Exclusive",
        "--endpoint",
        endpoint,
    )
    assert created["group"]["attributes"] == {"lite.bind.topic": "LiteParent", "lite.sub.model": "Exclusive"}
    updated = ok_json(
        "group",
        "update",
        "LiteCliGroup",
        "--attribute",
        "lite.sub.client.quota=10",
        "--remove-attribute",
        "lite.sub.model",
        "--endpoint",
        endpoint,
    )
    assert updated["group"]["attributes"] == {"lite.bind.topic": "LiteParent", "lite.sub.client.quota": "10"}
    [row] = [line for line in ok("group", "list", "--endpoint", endpoint).splitlines() if "LiteCliGroup" in line]
    assert "lite.bind.topic=LiteParent, lite.sub.client.quota=10" in row
    assert "unknown group attribute 'lite.nope'" in fails(
        2, "group", "create", "LiteCliGroup", "--attribute", "lite.nope=1", "--endpoint", endpoint
    )
    assert "must be one of Shared, Exclusive" in fails(
        2, "group", "create", "LiteCliGroup", "--attribute", "lite.sub.model=exclusive", "--endpoint", endpoint
    )
    assert "expected KEY=VALUE" in fails(
        2, "group", "create", "LiteCliGroup", "--attribute", "x", "--endpoint", endpoint
    )


def test_group_retry_policy_options(endpoint):
    assert (
        ok("group", "create", "CliRetry", "--backoffs", "1s,5s,1500ms,2m", "--endpoint", endpoint)
        == "Created group CliRetry: not FIFO, 17 delivery attempts before the DLQ, retry policy customized "
        "1s,5s,1500ms,2m.\n"
    )
    document = ok_json(
        "group", "update", "CliRetry", "--initial-backoff", "1s", "--max-backoff", "1m", "--endpoint", endpoint
    )
    assert document["created"] is False
    assert document["group"]["retry_policy"] == {
        "kind": "exponential",
        "initial_backoff_ms": 1_000,
        "max_backoff_ms": 60_000,
        "backoff_multiplier": 2,
    }
    [row] = [line.split() for line in ok("group", "list", "--endpoint", endpoint).splitlines() if "CliRetry" in line]
    assert row == ["CliRetry", "no", "17", "exponential", "1s..1m", "x2"]
    ok("group", "update", "CliRetry", "--max-delivery-attempts", "3", "--endpoint", endpoint)  # policy kept
    assert ok_json("group", "update", "CliRetry", "--retry-policy", "default", "--endpoint", endpoint)["group"] == {
        "name": "CliRetry",
        "fifo": False,
        "max_delivery_attempts": 3,
        "system": False,
        "retry_policy": {"kind": "default"},
        "attributes": {},
    }

    assert "exclusive" in fails(2, "group", "create", "G", "--backoffs", "1s", "--max-backoff", "1m")
    assert "needs --backoffs" in fails(2, "group", "create", "G", "--retry-policy", "customized")
    assert "not a duration" in fails(2, "group", "create", "G", "--backoffs", "1s,soon")
    assert "max backoff must be" in fails(
        2, "group", "create", "G", "--initial-backoff", "1m", "--max-backoff", "1s", "--endpoint", endpoint
    )
    assert (
        fails(3, "group", "update", "CliNobody", "--backoffs", "1s", "--endpoint", endpoint)
        == "pyrmq: error: consumer group CliNobody does not exist\n"
    )


def test_consumer_progress(endpoint, store_stub):
    ok("topic", "create", "CliProgress", "--type", "NORMAL", "--queues", "2", "--endpoint", endpoint)
    ok("group", "create", "CliConsumers", "--endpoint", endpoint)
    for i in range(3):
        put(store_stub, "CliProgress", 0, f"CliProgress-{i}")
    store_stub.CommitConsumerOffset(
        pb.CommitConsumerOffsetRequest(group="CliConsumers", topic="CliProgress", queue_id=0, offset=1), timeout=10
    )
    wait_indexed(store_stub, "CliProgress", "CliProgress-2")

    table = ok("consumer", "progress", "CliConsumers", "--endpoint", endpoint)
    rows = [line.split() for line in table.splitlines() if line.strip().startswith("CliProgress")]
    assert rows == [
        ["CliProgress", "broker-a", "0", "0", "3", "1", "2"],
        ["CliProgress", "broker-a", "1", "0", "0", "-", "0"],
    ]
    assert "Total lag: 2" in table
    document = ok_json("consumer", "progress", "CliConsumers", "--topic", "CliProgress", "--endpoint", endpoint)
    assert document["group"] == "CliConsumers" and document["total_lag"] == 2
    assert document["queues"][0] == {
        "topic": "CliProgress",
        "broker_name": "broker-a",
        "queue_id": 0,
        "min_offset": 0,
        "broker_offset": 3,
        "consumer_offset": 1,
        "lag": 2,
    }

    assert (
        fails(3, "consumer", "progress", "CliNobody", "--endpoint", endpoint)
        == "pyrmq: error: consumer group CliNobody does not exist\n"
    )


def consumed_bodies(endpoint: str, topic: str, group: str, count: int) -> list[str]:
    """``pyrmq consume`` as ``group`` until ``count`` messages arrived (each acked)."""
    got = ok_json(
        "consume", topic, "--group", group, "--max", str(count), "--wait-seconds", "0", "--endpoint", endpoint
    )
    return sorted(m["body_text"] for m in got["messages"])


def test_consumer_reset_then_a_consumer_receives_from_the_new_position(endpoint, store_stub):
    ok("topic", "create", "CliReset", "--type", "NORMAL", "--queues", "2", "--endpoint", endpoint)
    ok("group", "create", "CliResetGroup", "--endpoint", endpoint)
    stamps = []
    for i in range(6):  # queue 0: r0 r2 r4, queue 1: r1 r3 r5
        stamps.append(put(store_stub, "CliReset", i % 2, f"CliReset-{i}", body=b"r%d" % i).store_timestamp_ms)
        time.sleep(0.005)  # distinct store times
    wait_indexed(store_stub, "CliReset", "CliReset-5")
    everything = [f"r{i}" for i in range(6)]
    assert consumed_bodies(endpoint, "CliReset", "CliResetGroup", 6) == everything  # a fresh topic: from the start

    table = ok(
        "consumer", "reset", "CliResetGroup", "--topic", "CliReset", "--to-offset", "earliest", "--endpoint", endpoint
    )
    assert "Reset consumer group CliResetGroup on topic CliReset" in table
    rows = [line.split() for line in table.splitlines() if line.strip().startswith("broker-a")]
    assert rows == [["broker-a", "0", "3", "0"], ["broker-a", "1", "3", "0"]]
    assert consumed_bodies(endpoint, "CliReset", "CliResetGroup", 6) == everything

    when = datetime.fromtimestamp(stamps[4] / 1000).isoformat(timespec="milliseconds")  # local time, like an operator
    document = ok_json(
        "consumer", "reset", "CliResetGroup", "--topic", "CliReset", "--to-timestamp", when, "--endpoint", endpoint
    )
    assert document == {
        "group": "CliResetGroup",
        "topic": "CliReset",
        "queues": [
            {"broker_name": "broker-a", "queue_id": 0, "old_offset": 3, "new_offset": 2},
            {"broker_name": "broker-a", "queue_id": 1, "old_offset": 3, "new_offset": 2},
        ],
    }
    assert consumed_bodies(endpoint, "CliReset", "CliResetGroup", 2) == ["r4", "r5"]

    by_millis = ok_json(
        "consumer",
        "reset",
        "CliResetGroup",
        "--topic",
        "CliReset",
        "--to-timestamp",
        str(stamps[3]),
        "--endpoint",
        endpoint,
    )
    assert [(q["queue_id"], q["new_offset"]) for q in by_millis["queues"]] == [(0, 2), (1, 1)]
    ok("consumer", "reset", "CliResetGroup", "--topic", "CliReset", "--to-offset", "latest", "--endpoint", endpoint)
    put(store_stub, "CliReset", 1, "CliReset-6", body=b"r6")
    assert consumed_bodies(endpoint, "CliReset", "CliResetGroup", 1) == ["r6"]

    assert "--to-timestamp" in fails(
        2, "consumer", "reset", "CliResetGroup", "--topic", "CliReset", "--endpoint", endpoint
    )
    assert "not earliest, latest or an offset" in fails(
        2, "consumer", "reset", "CliResetGroup", "--topic", "CliReset", "--to-offset", "first", "--endpoint", endpoint
    )
    assert (
        fails(3, "consumer", "reset", "CliNobody", "--topic", "CliReset", "--to-offset", "0", "--endpoint", endpoint)
        == "pyrmq: error: consumer group CliNobody does not exist\n"
    )


def test_message_query_by_key_and_id(endpoint, store_stub):
    ok("topic", "create", "CliMessages", "--type", "NORMAL", "--endpoint", endpoint)
    client_id = "01C0FFEE0000000146A20B13E206000007"
    result = put(store_stub, "CliMessages", 3, client_id, keys="cli-order-7", body=b"hello admin")
    wait_indexed(store_stub, "CliMessages", "cli-order-7")

    table = ok("message", "query", "--topic", "CliMessages", "--key", "cli-order-7", "--endpoint", endpoint)
    [row] = [line.split() for line in table.splitlines() if client_id in line]
    assert row[:7] == [client_id, "CliMessages", "broker-a", "3", "0", "TagA", "cli-order-7"] and row[-2:] == [
        "hello",
        "admin",
    ]
    [message] = ok_json("message", "query", "--topic", "CliMessages", "--key", "cli-order-7", "--endpoint", endpoint)[
        "messages"
    ]
    assert (message["message_id"], message["offset_msg_id"], message["body_text"], message["body_base64"]) == (
        client_id,
        result.offset_msg_id,
        "hello admin",
        "aGVsbG8gYWRtaW4=",
    )
    assert "No message of topic CliMessages has key nothing" in ok(
        "message", "query", "--topic", "CliMessages", "--key", "nothing", "--endpoint", endpoint
    )

    details = ok("message", "query", "--id", client_id, "--endpoint", endpoint)
    assert "Offset message ID" in details and result.offset_msg_id in details and "hello admin" in details
    [by_offset_id] = ok_json("message", "query", "--id", result.offset_msg_id, "--endpoint", endpoint)["messages"]
    assert by_offset_id["message_id"] == client_id
    assert (
        fails(3, "message", "query", "--id", "01NOPE", "--endpoint", endpoint)
        == "pyrmq: error: no message with id 01NOPE\n"
    )


def test_usage_errors_exit_2(endpoint):
    assert "--key needs --topic" in fails(2, "message", "query", "--key", "k", "--endpoint", endpoint)
    assert "--type" in fails(2, "topic", "create", "T", "--endpoint", endpoint)
    assert "must be at least 1" in fails(2, "topic", "create", "T", "--type", "NORMAL", "--queues", "0")


def test_unreachable_endpoint_exits_4():
    error = fails(4, "topic", "list", "--endpoint", "127.0.0.1:1", "--timeout", "5", run=pyrmq_process)
    assert error.startswith("pyrmq: error: 127.0.0.1:1: UNAVAILABLE")


def test_pyrmq_pipeline_runs_the_pipeline_jobs_cli() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "services.launcher.cli", "pipeline", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "pipeline.jobs {export|rebuild|audit|stats}" in done.stdout + done.stderr  # the jobs' own usage
    bad = subprocess.run(
        [sys.executable, "-m", "services.launcher.cli", "pipeline", "no-such-job"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
