"""The remoting peers against a whole ``pyrmq up`` cluster (store, broker, scheduler, txcheck):
retry and DLQ through CONSUMER_SEND_MSG_BACK and the scheduler, delay levels, transactions
answered by the producer's check-back; and a store killed with -9 under a remoting producer,
nothing acknowledged lost.

Delay levels are 1 s each here (the store's and the scheduler's ``delay_levels``, which must
agree), and txcheck checks a half after 1 s, every second, so the flows take seconds."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.domain.remoting.codes import RequestCode, ResponseCode
from services.launcher.up import parse_summary
from tests.support.cli import run_pyrmq
from tests.support.processes import (
    BROKER_READY,
    Process,
    broker_command,
    pyrmq_up_command,
    start_store,
    store_command,
)
from tests.support.remoting_client import RemotingTestClient
from tests.support.remoting_peers import start_peer
from tests.support.waits import wait_until

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
LEVELS = " ".join(["1s"] * 18)
CONFIG = f"""
[store]
delay_levels = "{LEVELS}"
[scheduler]
delay_levels = "{LEVELS}"
[txcheck]
transaction_timeout_ms = 1000
check_interval_ms = 1000
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("cluster")
    config = home / "pyrmq.toml"
    config.write_text(CONFIG)
    topics = ("RetryT", "DelayT", "TxT", "DlqT")
    create = [arg for topic in topics for arg in ("--create-topic", topic)]
    up = Process(
        pyrmq_up_command(home / "data", "--config", str(config), *create, metrics_port=-1, remoting_port=0), home
    )
    try:
        lines = parse_summary(up.wait_line(READY).group(0))
        yield {"namesrv": lines["broker"]["remoting"], "endpoint": lines["broker"]["endpoint"], "home": str(home)}
    finally:
        up.stop(signal.SIGTERM)


def consumer(cluster: dict[str, str], tmp_path: Path, name: str, **command: object):
    return start_peer(
        "ali-ons",
        {"role": "push-consumer", "nameSrv": cluster["namesrv"], "suspendMs": 1000, **command},
        tmp_path / name,
    )


def produce(cluster: dict[str, str], tmp_path: Path, topic: str, messages: list[dict]) -> list[dict]:
    command = {
        "role": "producer",
        "nameSrv": cluster["namesrv"],
        "topic": topic,
        "group": "PID_C",
        "messages": messages,
    }
    with start_peer("ali-ons", command, tmp_path / f"producer-{topic}") as producer:
        sent = producer.wait_events("sent", len(messages), timeout_s=30)
        producer.wait_events("done", timeout_s=30)
    return sent


def test_a_failed_message_is_retried_then_consumed(cluster: dict[str, str], tmp_path: Path) -> None:
    with consumer(cluster, tmp_path, "c", topic="RetryT", group="CID_RETRY", failFirst=1, count=1) as c:
        produce(cluster, tmp_path, "RetryT", [{"body": "try again", "tag": "t"}])
        events = c.wait_events("received", 2, timeout_s=60)
    assert [(e["body"], e["reconsumeTimes"], e["result"]) for e in events] == [
        ("try again", 0, "RETRY"),
        ("try again", 1, "SUCCESS"),
    ]


def test_after_the_last_attempt_a_message_goes_to_the_dlq(cluster: dict[str, str], tmp_path: Path) -> None:
    # The C++ client's CONSUMER_SEND_MSG_BACK names no maxReconsumeTimes: the group's retry count
    # decides, set as an operator does (2 deliveries: 1 retry).
    code, _, err = run_pyrmq(
        "group", "create", "GID_DLQ", "--max-delivery-attempts", "2", "--endpoint", cluster["endpoint"]
    )
    assert code == 0, err
    command = {
        "role": "push-consumer",
        "nameSrv": cluster["namesrv"],
        "topic": "DlqT",
        "group": "GID_DLQ",
        "failFirst": 99,
    }
    with start_peer("cpp", command, tmp_path / "c") as c:
        produce(cluster, tmp_path, "DlqT", [{"body": "dead letter"}])
        events = c.wait_events("received", 2, timeout_s=60)  # the first delivery and its one retry
        assert [e["reconsumeTimes"] for e in events] == [0, 1]
        with RemotingTestClient(cluster["namesrv"]) as client:
            pulled = []

            def in_dlq() -> bool:
                pulled[:] = [client.pull("DLQ_READER", "%DLQ%GID_DLQ", 0, 0)]
                return pulled[0].code == ResponseCode.SUCCESS

            wait_until(in_dlq, 30, what="the message in %DLQ%GID_DLQ", describe=lambda: pulled[0].remark)
    assert b"dead letter" in pulled[0].body


def test_a_delay_level_holds_the_message(cluster: dict[str, str], tmp_path: Path) -> None:
    with consumer(cluster, tmp_path, "c", topic="DelayT", group="CID_DELAY", count=1) as c:
        produce(cluster, tmp_path, "DelayT", [{"body": "later", "delayLevel": 3}])
        [event] = c.wait_events("received", 1, timeout_s=60)
    # The client sets DELAY; REAL_TOPIC / REAL_QID say the broker parked it in
    # SCHEDULE_TOPIC_XXXX and the scheduler brought it back (a message not parked has neither).
    assert event["body"] == "later" and event["properties"]["DELAY"] == "3"
    assert (event["properties"]["REAL_TOPIC"], event["properties"]["REAL_QID"]) == ("DelayT", str(event["queueId"]))


def test_a_cpp_producers_delay_level_holds_the_message(cluster: dict[str, str], tmp_path: Path) -> None:
    command = {
        "role": "producer",
        "nameSrv": cluster["namesrv"],
        "topic": "DelayT",
        "group": "PID_CD",
        "messages": [{"body": "cpp later", "delayLevel": 2}],
    }
    with consumer(cluster, tmp_path, "c", topic="DelayT", group="CID_CDELAY") as c:
        with start_peer("cpp", command, tmp_path / "cpp-producer") as producer:
            producer.wait_events("done", timeout_s=30)
        events = c.wait_events("received", 1, timeout_s=60, where=lambda e: e["body"] == "cpp later")
    assert events[0]["properties"]["DELAY"] == "2" and events[0]["properties"]["REAL_TOPIC"] == "DelayT"


def test_a_transaction_is_committed_by_the_producers_check_back(cluster: dict[str, str], tmp_path: Path) -> None:
    command = {
        "role": "transaction-producer",
        "nameSrv": cluster["namesrv"],
        "topic": "TxT",
        "group": "PID_TX",
        "messages": [{"body": "decided later", "keys": ["tx-1"]}],
        "localAnswer": "UNKNOWN",
        "checkAnswer": "COMMIT",
    }
    with (
        start_peer("cpp", command, tmp_path / "tx") as producer,
        consumer(cluster, tmp_path, "c", topic="TxT", group="CID_TX", count=1) as c,
    ):
        producer.wait_events("sent", 1, timeout_s=30)
        check = producer.wait_events("check", 1, timeout_s=60)[0]
        [event] = c.wait_events("received", 1, timeout_s=60)
    assert check["body"] == "decided later" and check["topic"] == "TxT"
    assert event["body"] == "decided later" and event["keys"] == ["tx-1"]


def test_a_store_killed_with_minus_9_loses_nothing_acknowledged(tmp_path: Path, processes: list[Process]) -> None:
    store, ready = start_store(processes, tmp_path / "store", tmp_path)
    broker = Process(broker_command(ready["grpc"], remoting_port=0), tmp_path)
    processes.append(broker)
    broker_ready = broker.wait_line(BROKER_READY)
    namesrv = re.search(r"remoting=(\S+)", broker_ready.group(0))[1]
    code, _, err = run_pyrmq(
        "topic", "create", "KillT", "--type", "NORMAL", "--queues", "2", "--endpoint", broker_ready["endpoint"]
    )
    assert code == 0, err
    command = {
        "role": "producer",
        "nameSrv": namesrv,
        "topic": "KillT",
        "group": "PID_K",
        "retries": 0,
        "timeoutMs": 2000,
        "linger": True,
        "messages": [{"body": f"m{i}"} for i in range(200)],
    }
    with start_peer("ali-ons", command, tmp_path / "producer") as producer:
        producer.wait_events("sent", 50, timeout_s=30)
        store.popen.send_signal(signal.SIGKILL)  # mid-stream: later sends fail or are acknowledged
        store.popen.wait(10)
        wait_until(lambda: producer.events("done") or producer.events("error"), 60, what="the producer to finish")
        acknowledged = {e["msgId"] for e in producer.events("sent") if e["status"] == "SEND_OK"}
    assert len(acknowledged) >= 50
    port = int(ready["grpc"].rsplit(":", 1)[1])
    restarted = Process(
        store_command(tmp_path / "store", "--commitlog-file-size-bytes", str(1 << 20), port=port), tmp_path
    )
    processes.append(restarted)
    restarted.wait_line(re.compile(r"^pyrmq-store ready"))
    with RemotingTestClient(namesrv) as client:  # the broker's store client reconnects with a backoff
        queue = {"topic": "KillT", "queueId": "0"}
        wait_until(lambda: client.call(RequestCode.GET_MAX_OFFSET, queue).code == 0, 60, what="the store reached")
    with consumer({"namesrv": namesrv}, tmp_path, "c", topic="KillT", group="CID_K", count=len(acknowledged)) as c:
        received = c.wait_events("received", len(acknowledged), timeout_s=120)
    assert acknowledged <= {e["msgId"] for e in received}
