"""Delay, transaction and retry/DLQ flows of the official rocketmq-python-client on a topic spread
over two broker groups (issue 17), on ``pyrmq up --groups 2 --brokers 2``: every group's own
scheduler delivers its delay messages, every group's own transaction checker checks its open
halves through the brokers (the producer's TransactionChecker commits), and messages that are
never acked go to each group's %DLQ% topic after the group's max delivery attempts. Each flow's
messages are found in both groups (``Admin.QueryMessages`` names each one's group)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import grpc
import pytest
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from tests.support.official_client import Client, consume, produce
from tests.support.processes import Process, pyrmq_up_command
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("etcd", "rocketmq-python-client")

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
TOPIC, TX_TOPIC, DLQ_TOPIC = "Flows", "FlowsTx", "FlowsDlq"
GROUPS = {"broker-a", "broker-b"}
FAST_CHECKS = {"PYRMQ_TXCHECK_TRANSACTION_TIMEOUT_MS": "1000", "PYRMQ_TXCHECK_CHECK_INTERVAL_MS": "1000"}
# Shorter waits than the broker's minimums (10 s invisible, 5 s long polling), which only make
# the flows slower: the DLQ flow waits out each delivery's invisible time, and the official
# SimpleConsumer polls the route's queues in turn, broker-a's 8 then broker-b's 8, so it can
# long-poll an empty group 8 times in a row while the other holds the messages.
INVISIBLE_S = 2
AWAIT_S = 1
SHORT_WAITS = {
    "PYRMQ_BROKER_INVISIBLE_DURATION_MS_MIN": str(INVISIBLE_S * 1000),
    "PYRMQ_BROKER_LONG_POLLING_TIMEOUT_MS_MIN": str(AWAIT_S * 1000),
}


def groups_holding(admin: pb_grpc.AdminStub, topic: str, keys: list[str]) -> dict[str, str]:
    """key -> the broker group whose store holds the message with that key in ``topic`` (waiting
    up to 30 s: a %DLQ% topic is made when its first message moves there, a revive after the
    last delivery's invisible time)."""
    found: dict[str, str] = {}

    def all_found() -> bool:
        for key in keys:
            try:
                reply = admin.QueryMessages(pb.QueryMessagesRequest(topic=topic, key=key), timeout=10)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc  # the topic is not there yet
                return False
            if reply.messages:
                found[key] = reply.messages[0].broker_name
        return len(found) == len(keys)

    wait_until(all_found, 30, f"{keys} found in {topic}", describe=lambda: found)
    return found


def test_delay_transaction_and_dlq_over_two_groups(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(
        pyrmq_up_command(
            tmp_path / "data",
            "--groups",
            "2",
            "--brokers",
            "2",
            *(f"--create-topic={t}" for t in (TOPIC, TX_TOPIC, DLQ_TOPIC)),
        ),
        tmp_path,
        FAST_CHECKS | SHORT_WAITS,
    )
    processes.append(up)
    endpoint = up.wait_line(READY)["clients"]
    with grpc.insecure_channel(endpoint) as channel:
        admin = pb_grpc.AdminStub(channel)

        # Delay: 3 s ahead; each group's scheduler delivers its share, none early.
        keys = [f"delay-{i}" for i in range(6)]
        due_s = int(time.time()) + 4
        produce(tmp_path / "p1", endpoint, TOPIC, [{"body": k, "keys": [k], "delivery_timestamp": due_s} for k in keys])
        got = consume(
            tmp_path / "c1",
            endpoint,
            group="DelayGroup",
            topic=TOPIC,
            count=6,
            deadline_s=60,
            await_s=AWAIT_S,
            action="ack",
        )
        assert sorted(m["body"] for m in got) == keys and time.time() >= due_s
        assert set(groups_holding(admin, TOPIC, keys).values()) == GROUPS

        # Transactions left open: each group's txcheck asks the producer (through a broker), which commits.
        keys = [f"tx-{i}" for i in range(4)]
        producer = Client(
            tmp_path / "p2",
            {
                "endpoint": endpoint,
                "topics": [TX_TOPIC],
                "checker": "commit",
                "linger_s": 60,
                "linger_checks": len(keys),
                "messages": [{"topic": TX_TOPIC, "body": k, "keys": [k], "transaction": "open"} for k in keys],
            },
        )
        try:
            assert all(producer.next_line("ok")["ok"] for _ in keys)
            checked = {producer.next_line("checked", timeout_s=60)["checked"] for _ in keys}
            assert len(checked) == len(keys)
            producer.next_line("settings")  # its last line: every answer's EndTransaction has gone out
        finally:
            producer.stop()
        got = consume(
            tmp_path / "c2",
            endpoint,
            group="TxGroup",
            topic=TX_TOPIC,
            count=4,
            deadline_s=60,
            await_s=AWAIT_S,
            action="ack",
        )
        assert sorted(m["body"] for m in got) == keys
        assert set(groups_holding(admin, TX_TOPIC, keys).values()) == GROUPS

        # Never acked: two deliveries each (max delivery attempts 2), then each group's %DLQ%.
        admin.CreateGroup(pb.CreateGroupRequest(name="DlqGroup", max_delivery_attempts=2), timeout=10)
        keys = [f"dlq-{i}" for i in range(4)]
        produce(tmp_path / "p3", endpoint, DLQ_TOPIC, [{"body": k, "keys": [k]} for k in keys])
        got = consume(
            tmp_path / "c3",
            endpoint,
            group="DlqGroup",
            topic=DLQ_TOPIC,
            count=8,
            deadline_s=90,
            invisible_s=INVISIBLE_S,
            await_s=AWAIT_S,
            action="none",
        )
        assert sorted((m["body"], m["attempt"]) for m in got) == sorted((k, n) for k in keys for n in (1, 2))
        assert set(groups_holding(admin, "%DLQ%DlqGroup", keys).values()) == GROUPS
    assert up.stop(signal.SIGTERM) == 0, up.log()
