"""End to end with the official rocketmq-python-client 5.1.2: a producer leaves a transaction
open, the transaction checker asks it (through the broker's Telemetry stream), and its
TransactionChecker's answer settles it. Store and broker run in this process on 127.0.0.1:0;
the checker runs in-process (CheckService) or as ``python -m services.txcheck`` (kill -9 test).
Client processes: tests/broker/clients/send.py and consume.py."""

from __future__ import annotations

import random
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.runtime.clock import SystemClock
from services.store.client.client import GrpcStoreClient
from services.txcheck.config import TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker
from services.txcheck.rpc.broker_client import GrpcProducers
from services.txcheck.service import CheckService
from tests.support.official_client import WAIT_S, Client, consume
from tests.support.processes import Process
from tests.support.waits import wait_until

pytestmark = pytest.mark.needs("rocketmq-python-client")

ROOT = Path(__file__).resolve().parents[2]
TXCHECK_READY = re.compile(
    r"^pyrmq-txcheck ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+) "
    r"store=(?P<store>\S+) broker=(?P<broker>\S+)$"
)
FAST = dict(transaction_timeout_ms=1_000, check_interval_ms=500)  # the Python client's born time has whole seconds


def open_transactions(
    home: Path, endpoint: str, topic: str, checker: str, count: int = 1, linger_s: int = WAIT_S, **job
) -> Client:
    return Client(
        home,
        {
            "endpoint": endpoint,
            "topics": [topic],
            "checker": checker,
            "linger_s": linger_s,
            "messages": [
                {"topic": topic, "body": f"{topic} #{n}", "keys": [f"k{n}"], "transaction": "open"}
                for n in range(count)
            ],
            **job,
        },
    )


def real_messages(store_stub, topic: str) -> list[pb.Message]:
    return [
        m
        for q in range(8)
        for m in store_stub.GetMessages(
            pb.GetMessagesRequest(topic=topic, queue_id=q, queue_offset=0), timeout=10
        ).messages
    ]


def passes(metrics_url: str) -> float:
    """The pass count a txcheck process reports (pyrmq_txcheck_passes_total)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    match = re.search(r"^pyrmq_txcheck_passes_total (\S+)$", text, re.M)
    assert match, text
    return float(match[1])


@pytest.fixture
def run_checker(store_address) -> Iterator:
    """Start the checker core in this process against the real store and a broker."""
    started: list[tuple[CheckService, GrpcStoreClient, GrpcProducers, HalfMessageChecker]] = []

    def start(broker_port: int, **overrides) -> HalfMessageChecker:
        config = TxCheckConfig(
            store_address=store_address, broker_addresses=(f"127.0.0.1:{broker_port}",), **{**FAST, **overrides}
        )
        store, producers = GrpcStoreClient(store_address, put_stream=False), GrpcProducers(config.broker_addresses)
        checker = HalfMessageChecker(config, store, producers, SystemClock())
        service = CheckService(checker, config)
        service.start()
        started.append((service, store, producers, checker))
        return checker

    yield start
    for service, store, producers, _ in started:
        service.stop()
        producers.close()
        store.close()


def test_open_transactions_are_checked_committed_and_rolled_back(broker, store_stub, run_checker, topics, tmp_path):
    topics("TxCheckCommit", "TxCheckRollback")
    endpoint = f"127.0.0.1:{broker.port}"
    committing = open_transactions(tmp_path / "c", endpoint, "TxCheckCommit", "commit", linger_checks=1)
    rolling_back = open_transactions(tmp_path / "r", endpoint, "TxCheckRollback", "rollback", linger_checks=1)
    try:
        sent = [committing.next_line("ok"), rolling_back.next_line("ok")]
        assert all(s["ok"] for s in sent), sent
        assert real_messages(store_stub, "TxCheckCommit") == []  # invisible while open
        checker = run_checker(broker.port)
        assert committing.next_line("checked") == {"checked": sent[0]["message_id"], "answer": "commit"}
        assert rolling_back.next_line("checked") == {"checked": sent[1]["message_id"], "answer": "rollback"}
        wait_until(lambda: real_messages(store_stub, "TxCheckCommit"), WAIT_S, "the commit")
        done = checker.stats().passes
        wait_until(
            lambda: checker.stats().passes >= done + 3, WAIT_S, "three more passes"
        )  # nothing asked again, nothing new
        [committed] = real_messages(store_stub, "TxCheckCommit")
        assert committed.properties["UNIQ_KEY"] == sent[0]["message_id"] and committed.body == b"TxCheckCommit #0"
        assert committed.sys_flag & 0xC == 0x8
        assert real_messages(store_stub, "TxCheckRollback") == []
        stats = checker.stats()
        assert stats.checks_sent == 2 and stats.moved_to_max_time_topic == 0
        wait_until(
            lambda: dict(checker.stats().results) == {"commit": 1, "rollback": 1, "unknown": 0}, WAIT_S, "the results"
        )
    finally:
        committing.stop()
        rolling_back.stop()
    # The committed one is consumable like any message; the rolled back one never is.
    [delivered] = consume(
        tmp_path / "consumer",
        endpoint,
        mode="simple",
        group="TxCheckGroup",
        topic="TxCheckCommit",
        count=1,
        deadline_s=20,
        await_s=2,
    )
    assert delivered["body"] == "TxCheckCommit #0" and delivered["message_id"] == sent[0]["message_id"]
    # The proxy's GrpcConverter passes the checker's TRANSACTION_CHECK_TIMES through (it is not in
    # MessageConst.STRING_HASH_SET), as __transactionId__.
    assert delivered["keys"] == ["k0"] and delivered["properties"]["TRANSACTION_CHECK_TIMES"] == "1"


def test_a_check_waits_for_a_producer_to_connect(broker, store_stub, run_checker, topics, tmp_path):
    topics("TxCheckLate")
    """Nobody to ask: retried every pass, never counted; the producer that connects settles it."""
    endpoint = f"127.0.0.1:{broker.port}"
    first = open_transactions(tmp_path / "a", endpoint, "TxCheckLate", "commit", linger_s=0)
    sent = first.next_line("ok")
    first.next_line("settings")
    first.stop()  # gone before anyone asked it
    checker = run_checker(broker.port, check_max=1)
    wait_until(lambda: checker.stats().no_producer_retries >= 2, WAIT_S, "checks with no producer")
    assert checker.stats().moved_to_max_time_topic == 0
    later = Client(
        tmp_path / "b",
        {
            "endpoint": endpoint,
            "topics": ["TxCheckLate"],
            "checker": "commit",
            "linger_s": WAIT_S,
            "linger_checks": 1,
            "messages": [],
        },
    )
    try:
        assert later.next_line("checked")["checked"] == sent["message_id"]
        wait_until(lambda: real_messages(store_stub, "TxCheckLate"), WAIT_S, "the commit")
    finally:
        later.stop()
    assert checker.stats().moved_to_max_time_topic == 0


def start_txcheck(processes: list[Process], store_address: str, broker_port: int) -> tuple[Process, re.Match]:
    process = Process(
        [
            sys.executable,
            "-m",
            "services.txcheck",
            "--store-address",
            store_address,
            "--broker-address",
            f"127.0.0.1:{broker_port}",
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--transaction-timeout-ms",
            str(FAST["transaction_timeout_ms"]),
            "--check-interval-ms",
            str(FAST["check_interval_ms"]),
        ],
        ROOT,
    )
    processes.append(process)
    return process, process.wait_line(TXCHECK_READY)


def test_kill_9_of_txcheck_loses_no_open_transaction(broker, store_stub, store_address, processes, topics, tmp_path):
    topics("TxCheckKill")
    endpoint = f"127.0.0.1:{broker.port}"
    client = open_transactions(tmp_path / "c", endpoint, "TxCheckKill", "commit", count=3)
    try:
        sent = [client.next_line("ok") for _ in range(3)]
        assert all(s["ok"] for s in sent), sent

        def halves() -> int:
            return len(
                store_stub.GetMessages(
                    pb.GetMessagesRequest(topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, queue_offset=0), timeout=10
                ).messages
            )

        process, _ = start_txcheck(processes, store_address, broker.port)
        wait_until(lambda: halves() > 3, WAIT_S, "the first check copy")
        process.popen.kill()  # kill -9 in the middle of a pass
        process.popen.wait()
        process, ready = start_txcheck(processes, store_address, broker.port)
        wanted = {s["message_id"] for s in sent}
        wait_until(
            lambda: {m.properties["UNIQ_KEY"] for m in real_messages(store_stub, "TxCheckKill")} == wanted,
            WAIT_S,
            "every open transaction committed",
        )
        done = passes(ready["metrics"])
        wait_until(
            lambda: passes(ready["metrics"]) >= done + 3, WAIT_S, "three more passes"
        )  # nothing is committed again
        assert sorted(m.properties["UNIQ_KEY"] for m in real_messages(store_stub, "TxCheckKill")) == sorted(wanted)
        metrics = urllib.request.urlopen(ready["metrics"], timeout=10).read().decode()
        assert re.search(r"^pyrmq_txcheck_half_lag 0\.0$", metrics, re.M), metrics
        assert "pyrmq_txcheck_moved_to_max_time_topic_total 0.0" in metrics
        assert process.stop(15) == 0  # SIGTERM: a clean stop
    finally:
        client.stop()


@pytest.mark.slow
def test_repeated_kill_9_soak(broker, store_stub, store_address, processes, topics, tmp_path):
    """Twenty open transactions, txcheck killed at random moments six times, then left running:
    every transaction is committed exactly once, nothing is moved aside."""
    topics("TxCheckSoak")
    seed = int(time.time())
    print(f"seed {seed}")
    rng = random.Random(seed)
    endpoint = f"127.0.0.1:{broker.port}"
    client = open_transactions(tmp_path / "c", endpoint, "TxCheckSoak", "commit", count=20, linger_s=120)
    try:
        wanted = {client.next_line("ok")["message_id"] for _ in range(20)}
        for _ in range(6):
            process, _ = start_txcheck(processes, store_address, broker.port)
            time.sleep(rng.uniform(0.05, 1.5))  # a kill at a random moment of its run
            process.popen.kill()
            process.popen.wait()
        process, ready = start_txcheck(processes, store_address, broker.port)
        wait_until(
            lambda: {m.properties["UNIQ_KEY"] for m in real_messages(store_stub, "TxCheckSoak")} == wanted,
            90,
            "every open transaction committed",
        )
        done = passes(ready["metrics"])
        wait_until(
            lambda: passes(ready["metrics"]) >= done + 4, WAIT_S, "four more passes"
        )  # nothing is committed again
        assert sorted(m.properties["UNIQ_KEY"] for m in real_messages(store_stub, "TxCheckSoak")) == sorted(wanted)
        metrics = urllib.request.urlopen(ready["metrics"], timeout=10).read().decode()
        assert "pyrmq_txcheck_moved_to_max_time_topic_total 0.0" in metrics
    finally:
        client.stop()
