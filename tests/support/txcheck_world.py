"""The transaction checker's world for tests: a real store on a manual clock, and the broker's
own EndTransaction core on top of it; the ``world`` fixture (tests/txcheck/conftest.py exposes
it) builds one with ``TIMEOUT_MS`` / ``INTERVAL_MS``.

* ``World.store``: txcheck's store, a ``StoreDouble`` (tests/support/store_double.py: a started
  FileStore behind the real ``StoreClient``, store timestamps from the ``ManualClock``, every put
  dispatched at once). Its ``fail_after`` cuts txcheck off after n more store calls (a crash of
  txcheck at that point); ``messages`` / ``append`` read and write past the controls.
* Consumer offsets as the store keeps them: in memory, written to consumerOffset.json by a
  persist. The store's wall-clock persist timer is off here, so offsets are persisted only when
  a test says so (``persist_offsets``) or at a clean stop; ``crash_store`` kills the store
  (``FileStore.halt``: records stay in the page cache, unpersisted offsets are lost) and starts
  a new one on the same files.
* ``Broker``: the producer side as the broker does it, over its own connection to the same store
  (the real client; txcheck's ``fail_after`` does not cut it off): ``send_half`` parks a half
  message like ``producer.py``; ``end`` runs ``broker.transaction.TransactionService.end_transaction``
  (commit record + op record listing every copy); ``Producers`` is the fake relay: records each
  ``CheckRequest`` and answers SENT / NO_PRODUCER, optionally resolving the transaction right
  away like a producer's checker would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.broker.put_coalescer import DirectPutSink
from services.broker.transaction import HalfMessageTable, HalfRef, Resolution, TransactionService
from services.domain.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.runtime.clock import ManualClock
from services.store.client.client import StoreClient
from services.store.client.model import MessageToPut, StoredMessage
from services.store.rpc.servicer import StoreServicer
from services.txcheck.config import TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker
from services.txcheck.model import CheckOutcome, CheckRequest
from tests.support.store_double import ControlledTransport, StoreDouble

TIMEOUT_MS = 6_000
INTERVAL_MS = 30_000
NO_TIMED_PERSIST_MS = 3_600_000  # the store's offset persist timer (wall clock): not within a test


def broker_connection(store: StoreDouble) -> StoreClient:
    """The broker's own client of ``store``'s FileStore: the store's servicer behind the real
    client, puts dispatched at once like the double's, none of the double's controls set."""
    return StoreClient(ControlledTransport(StoreServicer(store.file_store), store.file_store))


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
    def __init__(self, store: StoreDouble, clock: ManualClock) -> None:
        self.clock = clock
        self.halves = HalfMessageTable()  # the broker's memory: kept when the store restarts
        self.connect(store)

    def connect(self, store: StoreDouble) -> None:
        """(Re)connect to ``store``'s FileStore (after a store restart: the new one)."""
        self.store = broker_connection(store)
        self.transactions = TransactionService(
            self.store, DirectPutSink(self.store.put_messages), self.halves, self.clock
        )

    def close(self) -> None:
        self.store.close()

    def send_half(self, tid: str, topic: str = "TxTopic", body: bytes = b"money", **extra: str) -> StoredMessage:
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
        half = MessageToPut(
            topic=TRANS_HALF_TOPIC,
            queue_id=0,
            body=body,
            properties=properties,
            born_timestamp_ms=self.clock.now_ms(),
            allow_system_topic=True,
        )
        [outcome] = self.store.put_messages([half], allow_system_topics=True)
        assert outcome.ok, outcome
        self.halves.remember(tid, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))
        stored = self.store.look_message(outcome.phy_offset)
        assert stored is not None
        return stored

    def end(self, tid: str, resolution: Resolution, topic: str = "TxTopic", via: CheckRequest | None = None) -> None:
        if via is not None:  # what CheckTransaction remembers before relaying
            self.halves.remember(tid, HalfRef(topic, via.half.phy_offset, via.half.queue_offset))
        self.transactions.end_transaction(topic, tid, resolution, 3.0)


@dataclass
class World:
    root: Path
    clock: ManualClock
    store: StoreDouble
    broker: Broker
    producers: Producers
    config: TxCheckConfig

    def checker(self, **overrides) -> HalfMessageChecker:
        config = TxCheckConfig(**{**self.config.__dict__, **overrides}) if overrides else self.config
        return HalfMessageChecker(config, self.store, self.producers, self.clock)

    def advance(self, ms: int) -> None:
        self.clock.advance_ms(ms)

    # -- the store's lifecycle ----------------------------------------------------------------
    def persist_offsets(self) -> None:
        """What the store's offset persist timer does: write consumerOffset.json."""
        self.store.file_store.consumer_offsets.persist()

    def crash_store(self) -> None:
        """kill -9 of the store, then a new one on the same files: the records written survive
        (the page cache), consumer offsets are those last persisted. The broker reconnects;
        checkers made before the crash keep the old, closed client."""
        self.store.file_store.halt()
        self.store.close()
        self.broker.close()
        self.store = StoreDouble(self.root, self.clock, flush_consumer_offset_interval_ms=NO_TIMED_PERSIST_MS)
        self.broker.connect(self.store)

    def close(self) -> None:
        self.broker.close()
        self.store.close()

    # -- for assertions -----------------------------------------------------------------------
    def delivered(self, topic: str = "TxTopic") -> list[StoredMessage]:
        return self.store.messages(topic)

    def moved(self) -> list[StoredMessage]:
        return self.store.messages(TRANS_CHECK_MAX_TIME_TOPIC)

    def halves(self) -> list[StoredMessage]:
        return self.store.messages(TRANS_HALF_TOPIC)

    def ops(self) -> list[StoredMessage]:
        return self.store.messages(TRANS_OP_HALF_TOPIC)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = ManualClock()
    root = tmp_path / "store"
    store = StoreDouble(root, clock, flush_consumer_offset_interval_ms=NO_TIMED_PERSIST_MS)
    broker = Broker(store, clock)
    config = TxCheckConfig(transaction_timeout_ms=TIMEOUT_MS, check_interval_ms=INTERVAL_MS)
    world = World(root, clock, store, broker, Producers(broker), config)
    yield world
    world.close()
