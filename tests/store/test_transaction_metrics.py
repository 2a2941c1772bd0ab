"""Open transactions (half messages) per real topic, counted by the store's dispatch and kept in
config/transactionMetrics: halves, a check's copies, commits, rollbacks, repeated resolutions,
discards, and the counts after a clean restart, after crashes on either side of the file's
offset, and without the file."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from services.domain.contracts.transaction import encode_op, park_half
from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_COMMIT_TYPE, MessageRecord
from services.domain.format.properties_format import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
)
from services.domain.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.store.metadata.fastjson import loads
from services.store.metadata.transaction_metrics import TRANSACTION_METRICS_FILE
from services.store.store import FileStore
from tests.support.filestore import small_config
from tests.support.waits import wait_until

BORN_MS = 1_700_000_000_000


class Transactions:
    """Writes what the broker and the transaction checker write, straight into a FileStore."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.halves: dict[str, MessageRecord] = {}  # transaction id -> its latest half copy
        self.offsets: dict[str, list[int]] = {}  # transaction id -> half queue offsets of its copies

    def _put(self, record: MessageRecord) -> MessageRecord:
        [result] = self.store.put_messages([record], allow_system_topics=True)
        assert result.ok, result.error
        return record

    def send(self, transaction_id: str, topic: str = "TxTopic") -> None:
        properties = {"UNIQ_KEY": transaction_id, "TRAN_MSG": "true", "PGROUP": "TxGroup"}
        half_topic, half_queue = park_half(properties, topic, 0, transaction_id)
        self._copy(transaction_id, MessageRecord(half_topic, half_queue, b"tx", properties, born_timestamp_ms=BORN_MS))

    def _copy(self, transaction_id: str, record: MessageRecord) -> None:
        self.halves[transaction_id] = self._put(record)
        self.offsets.setdefault(transaction_id, []).append(record.queue_offset)

    def check_copy(self, transaction_id: str, **extra: str) -> None:
        """The checker re-appends the half (a check, or an immunity push-back)."""
        half = self.halves[transaction_id]
        properties = {**half.properties, **(extra or {TRANSACTION_CHECK_TIMES: "1"})}
        self._copy(transaction_id, MessageRecord(TRANS_HALF_TOPIC, 0, half.body, properties, born_timestamp_ms=BORN_MS))

    def op(self, *transaction_ids: str) -> None:
        """An op record listing every copy of these transactions known so far."""
        properties, body = encode_op(sorted(o for t in transaction_ids for o in self.offsets[t]))
        self._put(MessageRecord(TRANS_OP_HALF_TOPIC, 0, body, properties, born_timestamp_ms=BORN_MS))

    def commit(self, transaction_id: str) -> None:
        half = self.halves[transaction_id]
        self._put(
            MessageRecord(
                half.properties["REAL_TOPIC"],
                0,
                half.body,
                dict(half.properties),
                sys_flag=SYSFLAG_TRANSACTION_COMMIT_TYPE,
                born_timestamp_ms=BORN_MS,
                prepared_transaction_offset=half.phy_offset,
            )
        )
        self.op(transaction_id)

    def rollback(self, transaction_id: str) -> None:
        self.op(transaction_id)

    def discard(self, transaction_id: str) -> None:
        half = self.halves[transaction_id]
        self._put(MessageRecord(TRANS_CHECK_MAX_TIME_TOPIC, 0, half.body, dict(half.properties)))

    def counts(self) -> dict[str, int]:
        self.store.reput.run_once()
        return self.store.transactions.half_messages()


@pytest.fixture
def reopen(clock) -> Iterator[Callable[..., FileStore]]:
    """Stop a store (cleanly, or ``crash``: as kill -9 would) and start it again on its files."""
    opened: list[FileStore] = []

    def again(store: FileStore, crash: bool = False) -> FileStore:
        if crash:
            store.halt()
        else:
            store.shutdown()
        opened.append(FileStore(store.config, clock))
        opened[-1].start()
        return opened[-1]

    yield again
    for store in opened:
        store.shutdown()


def test_each_open_transaction_counts_once_by_real_topic(make_store):
    tx = Transactions(make_store())
    for transaction_id in ("C1", "R1", "K1", "D1"):
        tx.send(transaction_id)
    tx.send("O1", topic="OtherTopic")
    assert tx.counts() == {"TxTopic": 4, "OtherTopic": 1}
    tx.check_copy("C1")
    tx.check_copy("K1", **{TRANSACTION_PREPARED_QUEUE_OFFSET: "2", CHECK_IMMUNITY_TIME_IN_SECONDS: "60"})
    assert tx.counts() == {"TxTopic": 4, "OtherTopic": 1}  # a copy is no new transaction
    tx.commit("C1")  # the committed record, then the op record listing both copies: -1 once
    assert tx.counts() == {"TxTopic": 3, "OtherTopic": 1}
    tx.rollback("R1")
    assert tx.counts() == {"TxTopic": 2, "OtherTopic": 1}
    tx.op("C1", "R1")  # resolved again (a check's answer after the client's): nothing
    tx.check_copy("R1")  # the checker copied it before it saw the op record
    tx.op("R1")  # ... and the repeated resolution covers the copy: nothing either
    assert tx.counts() == {"TxTopic": 2, "OtherTopic": 1}
    tx.rollback("K1")  # the op record lists the push-back copy and the original
    tx.discard("D1")  # checked too often: moved to TRANS_CHECK_MAX_TIME_TOPIC
    tx.commit("O1")
    assert tx.counts() == {"TxTopic": 0, "OtherTopic": 0}  # topics stay, at 0 (as in RocketMQ)


def test_counts_and_open_transactions_survive_a_restart_in_rocketmqs_file(make_store, reopen):
    store = make_store()
    tx = Transactions(store)
    tx.send("A")
    tx.send("B")
    tx.send("C", topic="OtherTopic")
    tx.check_copy("A")
    tx.commit("C")
    assert tx.counts() == {"TxTopic": 2, "OtherTopic": 0}
    tx.store = store = reopen(store)
    document = loads((store.config.config_dir / TRANSACTION_METRICS_FILE).read_text())
    assert {t: m["count"] for t, m in document["transactionCount"].items()} == {"TxTopic": 2, "OtherTopic": 0}
    assert document["transactionCount"]["TxTopic"]["timeStamp"] > 0
    assert set(document["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    assert document["phyOffset"] == store.commitlog.max_offset
    assert document["openTransactions"] == {"TxTopic": {"A": tx.offsets["A"], "B": tx.offsets["B"]}}
    assert store.transactions.half_messages() == {"TxTopic": 2, "OtherTopic": 0}
    tx.op("A")  # lists A's copies written before the restart: the store still knows them
    tx.rollback("B")
    assert tx.counts() == {"TxTopic": 0, "OtherTopic": 0}


def test_a_crash_after_the_file_was_written_replays_only_what_it_did_not_count(tmp_path, clock, reopen):
    # No checkpoint after start: reput restarts at the beginning, before the file's offset, and
    # the counter must skip what it counted already.
    config = small_config(tmp_path / "store", flush_consume_queue_interval_ms=600_000)
    store = FileStore(config, clock)
    store.start()
    tx = Transactions(store)
    tx.send("A")
    tx.send("B")
    tx.send("C")
    tx.commit("A")
    assert tx.counts() == {"TxTopic": 2}
    assert store.transactions.persist()
    tx.rollback("B")
    tx.send("D")
    tx.check_copy("C")
    assert tx.counts() == {"TxTopic": 2}
    assert store.checkpoint.current.dispatched_phy_offset < store.transactions.valid_to
    tx.store = store = reopen(store, crash=True)
    assert store.transactions.half_messages() == {"TxTopic": 2}
    tx.op("C")  # both of C's copies are known, the one written after the file too
    assert tx.counts() == {"TxTopic": 1}


def test_a_crash_after_the_checkpoint_replays_from_the_file_up_to_it(make_store, reopen):
    store = make_store()
    tx = Transactions(store)
    tx.send("A")
    tx.send("B")
    assert tx.counts() == {"TxTopic": 2}
    assert store.transactions.persist()
    counted_to = store.transactions.valid_to
    tx.commit("A")
    tx.send("E", topic="OtherTopic")
    tx.check_copy("B")
    assert tx.counts() == {"TxTopic": 1, "OtherTopic": 1}
    end = store.commitlog.max_offset
    wait_until(lambda: store.checkpoint.current.dispatched_phy_offset >= end)  # the 50 ms ConsumeQueue flush
    tx.store = store = reopen(store, crash=True)
    assert store.recovery.reput_from_offset > counted_to
    assert store.transactions.half_messages() == {"TxTopic": 1, "OtherTopic": 1}
    tx.rollback("B")
    assert tx.counts() == {"TxTopic": 0, "OtherTopic": 1}


def test_without_the_file_the_counts_are_rebuilt_from_the_commitlog(make_store, reopen):
    store = make_store()
    tx = Transactions(store)
    for transaction_id in ("A", "B", "C"):
        tx.send(transaction_id)
    tx.check_copy("A")
    tx.rollback("C")
    assert tx.counts() == {"TxTopic": 2}
    store.shutdown()
    (store.config.config_dir / TRANSACTION_METRICS_FILE).unlink()
    (store.config.config_dir / (TRANSACTION_METRICS_FILE + ".bak")).unlink(missing_ok=True)
    tx.store = store = reopen(store)
    assert store.transactions.half_messages() == {"TxTopic": 2}
    tx.commit("A")
    assert tx.counts() == {"TxTopic": 1}


def test_a_file_beyond_the_recovered_commitlog_is_recounted(make_store, reopen):
    store = make_store()
    tx = Transactions(store)
    tx.send("A")
    tx.send("B")
    assert tx.counts() == {"TxTopic": 2}
    store.shutdown()
    path = store.config.config_dir / TRANSACTION_METRICS_FILE
    text = path.read_text()
    phy_offset = loads(text)["phyOffset"]
    # As if the file had counted records a crash took back from the CommitLog.
    path.write_text(text.replace(f'"phyOffset":{phy_offset}', f'"phyOffset":{phy_offset + 4096}'))
    tx.store = store = reopen(store)
    assert store.transactions.half_messages() == {"TxTopic": 2}
    assert store.transactions.valid_to == store.commitlog.max_offset


def test_a_file_rocketmq_wrote_is_read_but_recounted_from_the_commitlog(make_store, reopen):
    store = make_store()
    tx = Transactions(store)
    tx.send("A")
    tx.send("B")
    tx.rollback("B")
    assert tx.counts() == {"TxTopic": 1}
    store.shutdown()
    # RocketMQ 5's own file: counts only (here a stale 7), no phyOffset to replay from.
    (store.config.config_dir / TRANSACTION_METRICS_FILE).write_text(
        '{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},'
        '"transactionCount":{"TxTopic":{"count":7,"timeStamp":1700000000000}}}'
    )
    tx.store = store = reopen(store)
    assert store.transactions.half_messages() == {"TxTopic": 1}
