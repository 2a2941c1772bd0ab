"""The transaction checker's world for tests: the store's reference model on a manual clock, and
the broker's own EndTransaction core on top of it; the ``world`` fixture (tests/txcheck/conftest.py
exposes it) builds one with ``TIMEOUT_MS`` / ``INTERVAL_MS``.

* ``MemoryClientStore``: the store client's calls (``txcheck.model.TxStore`` and the broker's
  ``TransactionStore``) over ``MemoryStore`` (real offsets, store timestamps from the
  ``ManualClock``, consumer offsets with ``halt()`` = a crash that keeps only the persisted
  ones); ``fail_after`` makes the n-th next call raise StoreUnavailableError (a crash of
  txcheck at that point).
* ``Broker``: the producer side as the broker does it: ``send_half`` parks a half message like
  ``producer.py``; ``end`` runs ``broker.transaction.TransactionService.end_transaction`` over
  the same store (commit record + op record listing every copy); ``Producers`` is the fake
  relay: records each ``CheckRequest`` and answers SENT / NO_PRODUCER, optionally resolving
  the transaction right away like a producer's checker would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from services.broker.put_coalescer import DirectPutSink
from services.broker.transaction import HalfMessageTable, HalfRef, Resolution, TransactionService
from services.domain.format.commitlog_format import MessageRecord, host_from_string
from services.domain.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.runtime.clock import ManualClock
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import GetOutcome, PutOutcome, StoredMessage, StoreMessage, stored_from_record
from services.store.memory_store import MemoryStore
from services.txcheck.config import TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker
from services.txcheck.model import CheckOutcome, CheckRequest
from tests.support.filestore import small_config

TIMEOUT_MS = 6_000
INTERVAL_MS = 30_000


class MemoryClientStore:
    """The store client's calls that txcheck (``txcheck.model.TxStore``) and the broker's
    transaction core make, served by the store's reference model (``MemoryStore``: synchronous
    dispatch, store times from the manual clock), in the client's types. ``fail_after`` makes the
    call after that many more raise StoreUnavailableError (a crash of txcheck at that point)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.fail_after: int | None = None  # raise on the call after this many more
        self.calls = 0

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_after is not None:
            if self.fail_after <= 0:
                raise StoreUnavailableError("injected failure")
            self.fail_after -= 1

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetOutcome:
        self._tick()
        result = self.store.get_messages(topic, queue_id, queue_offset, max_count)
        return GetOutcome(
            result.status,
            [stored_from_record(r) for r in result.messages],
            result.next_begin_offset,
            result.min_offset,
            result.max_offset,
        )

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        self._tick()
        return self.store.min_offset_in_queue(topic, queue_id), self.store.max_offset_in_queue(topic, queue_id)

    def put_messages(self, messages: list[StoreMessage], allow_system_topics: bool = False) -> list[PutOutcome]:
        self._tick()
        records = [
            MessageRecord(
                topic=m.topic,
                queue_id=m.queue_id,
                body=m.body,
                properties=dict(m.properties),
                flag=m.flag,
                sys_flag=m.sys_flag,
                born_timestamp_ms=m.born_timestamp_ms,
                born_host=host_from_string(m.born_host or "127.0.0.1:0"),
                reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset,
            )
            for m in messages
        ]
        return [
            PutOutcome(r.status, r.queue_offset, r.phy_offset, error=r.error, store_timestamp_ms=r.store_timestamp_ms)
            for r in self.store.put_messages(records, allow_system_topics)
        ]

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._tick()
        self.store.consumer_offsets.commit_offset(group, topic, queue_id, offset)

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        self._tick()
        return self.store.consumer_offsets.query_offset(group, topic, queue_id)

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        self._tick()
        return [stored_from_record(r) for r in self.store.query_messages_by_key(topic, key, max_num, 0, 2**62)]

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        record = self.store.look_message_by_phy_offset(phy_offset)
        return None if record is None else stored_from_record(record)

    # -- for assertions -----------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int = 0) -> list[MessageRecord]:
        return self.store.get_messages(topic, queue_id, 0, 10_000).messages


@dataclass
class Producers:
    """The fake relay. ``answer(request)`` -> Resolution | None runs as the producer's checker."""

    broker: Broker
    outcome: CheckOutcome = CheckOutcome.SENT
    answer: Callable[[CheckRequest], Resolution | None] | None = None
    requests: list[CheckRequest] = field(default_factory=list)

    def check(self, request: CheckRequest) -> CheckOutcome:
        self.requests.append(request)
        if self.outcome is CheckOutcome.SENT and self.answer is not None:
            resolution = self.answer(request)
            if resolution is not None:
                self.broker.end(request.transaction_id, resolution, topic=request.topic, via=request)
        return self.outcome

    @property
    def asked(self) -> list[str]:
        return [r.transaction_id for r in self.requests]


class Broker:
    def __init__(self, store: MemoryStore, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.halves = HalfMessageTable()
        broker_store = MemoryClientStore(store)
        self.transactions = TransactionService(
            broker_store, DirectPutSink(broker_store.put_messages), self.halves, clock
        )

    def send_half(self, tid: str, topic: str = "TxTopic", body: bytes = b"money", **extra: str) -> MessageRecord:
        """A half message as producer.py parks it (born now, by the manual clock)."""
        properties = {
            "TAGS": "T",
            "UNIQ_KEY": tid,
            "TRAN_MSG": "true",
            "RECONSUME_TIME": "0",
            "PGROUP": topic,
            "CLUSTER": "DefaultCluster",
            "__transactionId__": tid,
            "REAL_TOPIC": topic,
            "REAL_QID": "1",
            **extra,
        }
        record = MessageRecord(
            topic=TRANS_HALF_TOPIC, queue_id=0, body=body, properties=properties, born_timestamp_ms=self.clock.now_ms()
        )
        [result] = self.store.put_messages([record], allow_system_topics=True)
        assert result.ok
        self.halves.remember(tid, HalfRef(topic, result.phy_offset, result.queue_offset))
        return self.store.look_message_by_phy_offset(result.phy_offset)

    def end(self, tid: str, resolution: Resolution, topic: str = "TxTopic", via: CheckRequest | None = None) -> None:
        if via is not None:  # what CheckTransaction remembers before relaying
            self.halves.remember(tid, HalfRef(topic, via.half.phy_offset, via.half.queue_offset))
        self.transactions.end_transaction(topic, tid, resolution, 3.0)


@dataclass
class World:
    clock: ManualClock
    memory: MemoryStore
    store: MemoryClientStore
    broker: Broker
    producers: Producers
    config: TxCheckConfig

    def checker(self, **overrides) -> HalfMessageChecker:
        config = TxCheckConfig(**{**self.config.__dict__, **overrides}) if overrides else self.config
        return HalfMessageChecker(config, self.store, self.producers, self.clock)

    def advance(self, ms: int) -> None:
        self.clock.advance_ms(ms)

    def delivered(self, topic: str = "TxTopic") -> list[MessageRecord]:
        return [r for q in range(8) for r in self.store.queue(topic, q)]

    def moved(self) -> list[MessageRecord]:
        return self.store.queue(TRANS_CHECK_MAX_TIME_TOPIC)

    def halves(self) -> list[MessageRecord]:
        return self.store.queue(TRANS_HALF_TOPIC)

    def ops(self) -> list[MessageRecord]:
        return self.store.queue(TRANS_OP_HALF_TOPIC)


@pytest.fixture
def world(tmp_path) -> World:
    clock = ManualClock()
    memory = MemoryStore(small_config(tmp_path / "store", commitlog_file_size_bytes=1 << 20), clock)
    memory.start()
    broker = Broker(memory, clock)
    config = TxCheckConfig(transaction_timeout_ms=TIMEOUT_MS, check_interval_ms=INTERVAL_MS)
    return World(clock, memory, MemoryClientStore(memory), broker, Producers(broker), config)
