"""The pop journal (services/store/pop/journal.py, restore.py): the pop engine's state survives a
store restart (and, tests/store/test_config_replication.py, a failover) through the CommitLog."""

from __future__ import annotations

import pytest

from services.domain.format import pop_journal_format as fmt
from services.domain.names import POP_JOURNAL_TOPIC
from services.domain.statuses import PutStatus
from services.store.errors import ServiceNotAvailableError
from services.store.model import PutResult
from services.store.pop import journal as journal_module
from services.store.pop.journal import LiteOffsetFollower, read_journal
from services.store.pop.model import AckStatus, PopStatus
from tests.support.store_pop import (
    GROUP,
    INVISIBLE_MS,
    TOPIC,
    committed,
    create_topic,
    pop,
    put_bodies,
    revive,
)
from tests.support.waits import wait_until


def journal_records(store) -> list:
    records, _ = read_journal(store.get_messages, store.max_offset_in_queue)
    return records


def test_a_restart_keeps_what_was_acked_and_what_is_in_flight(open_store, clock):
    store = open_store()
    create_topic(store)
    put_bodies(store, *(b"m%d" % i for i in range(5)))
    popped = pop(store).messages
    for i in (0, 1, 3):
        assert store.pop.ack(GROUP, TOPIC, popped[i].receipt_handle) is AckStatus.OK
    assert committed(store) == 2
    store.shutdown()

    store = open_store()
    assert committed(store) == 2
    assert pop(store).status is PopStatus.NO_MESSAGE  # 2 and 4 in flight, 3 acked: nothing to hand out
    assert store.pop.ack(GROUP, TOPIC, popped[2].receipt_handle) is AckStatus.OK  # a handle from before
    # An ack from before, repeated (a broker retrying it on a new master): OK, and nothing moves.
    assert store.pop.ack(GROUP, TOPIC, popped[3].receipt_handle) is AckStatus.OK
    assert committed(store) == 4
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # 4 was never acked: redelivered, as a second attempt
    again = pop(store).messages
    assert [(m.record.body, m.delivery_attempt) for m in again] == [(b"m4", 2)]
    assert store.pop.ack(GROUP, TOPIC, again[0].receipt_handle) is AckStatus.OK
    assert committed(store) == 5


def test_a_change_of_invisible_time_survives_a_restart(open_store, clock):
    store = open_store()
    create_topic(store)
    put_bodies(store, b"a")
    [m] = pop(store).messages
    status, handle = store.pop.change_invisible_duration(GROUP, TOPIC, m.receipt_handle, 5 * INVISIBLE_MS)
    assert status is AckStatus.OK
    store.shutdown()

    store = open_store()
    clock.advance_ms(2 * INVISIBLE_MS)  # past the first invisible time, not the changed one
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.ack(GROUP, TOPIC, handle) is AckStatus.OK
    assert committed(store) == 1


def test_a_fifo_queue_stays_locked_across_a_restart(open_store, clock):
    store = open_store()
    create_topic(store)
    put_bodies(store, b"a", b"b", b"c")
    first = pop(store, fifo=True, max_count=2).messages
    assert [m.record.body for m in first] == [b"a", b"b"]
    store.shutdown()

    store = open_store()
    assert pop(store, fifo=True).status is PopStatus.NO_MESSAGE  # a, b still in flight: locked
    for m in first:
        assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.OK
    assert [m.record.body for m in pop(store, fifo=True).messages] == [b"c"]


def test_snapshots_bound_the_replay_and_give_the_same_state(open_store, clock, monkeypatch):
    monkeypatch.setattr(journal_module, "SNAPSHOT_EVERY_RECORDS", 3)
    store = open_store()
    create_topic(store)
    put_bodies(store, *(b"m%d" % i for i in range(20)))
    kept = []
    for _ in range(10):  # each round: a pop (one record) and an ack (another), one message kept
        popped = pop(store, max_count=2).messages
        assert store.pop.ack(GROUP, TOPIC, popped[0].receipt_handle) is AckStatus.OK
        kept.append(popped[1])
    journal = store.pop._journal
    assert journal is not None
    wait_until(lambda: journal.snapshots_written >= 2)
    records, snapshot_offset = read_journal(store.get_messages, store.max_offset_in_queue)
    assert snapshot_offset > 0 and isinstance(records[0], fmt.SnapshotPart)
    assert len(records) < 10  # from the last snapshot on, not the whole journal
    store.shutdown()

    store = open_store()
    assert committed(store) == 1  # m1 is the first one kept
    for m in kept:
        assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.OK
    assert committed(store) == 20


def test_a_store_that_never_pops_writes_no_journal(open_store):
    store = open_store()
    create_topic(store)
    put_bodies(store, b"a")
    store.shutdown()
    store = open_store()
    assert store.topics.get(POP_JOURNAL_TOPIC) is None
    assert journal_records(store) == []


def test_an_ack_the_journal_cannot_record_is_not_answered_ok(open_store):
    store = open_store()
    create_topic(store)
    put_bodies(store, b"a")
    [m] = pop(store).messages
    journal = store.pop._journal
    assert journal is not None

    def refuse(messages, allow_system_topics=False):
        return [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="disk full: writes refused") for _ in messages]

    put_messages, journal._put_messages = journal._put_messages, refuse
    with pytest.raises(ServiceNotAvailableError, match="disk full"):
        store.pop.ack(GROUP, TOPIC, m.receipt_handle)
    assert committed(store) == 0  # not acked: still in flight under its handle
    journal._put_messages = put_messages
    assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.OK  # the consumer's retry lands
    assert committed(store) == 1


class FakeLite:
    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str], int] = {}

    def commit(self, group: str, lmq: str, offset: int) -> None:
        self.offsets[(group, lmq)] = offset

    def commit_max(self, group: str, lmq: str, offset: int) -> None:
        self.offsets[(group, lmq)] = max(offset, self.offsets.get((group, lmq), -1))


def test_a_replica_keeps_lite_offsets_as_the_journal_says_and_never_moves_them_back():
    lite = FakeLite()
    master = [False]
    follower = LiteOffsetFollower(lite, lambda offset: None, lambda: master[0])
    lmq = "%LMQ%$Parent$chat-1"

    def finished(offset: int, committed: int) -> fmt.OpsRecord:
        return fmt.OpsRecord(0, ((fmt.Finished("g", lmq, 0, offset, committed, True),),))

    follower.apply(finished(4, 5))
    follower.apply(finished(2, 3))  # an older record read late: never back
    assert lite.offsets == {("g", lmq): 5}
    follower.apply(fmt.OpsRecord(0, (fmt.Reset("g", lmq, 0, 1),)))  # a reset says where
    assert lite.offsets == {("g", lmq): 1}
    follower.apply(fmt.OpsRecord(0, ((fmt.Finished("g", "Normal", 0, 9, 10, True),),)))  # not lite: config sync's
    assert lite.offsets == {("g", lmq): 1}


def test_a_handle_whose_delivery_expired_stays_invalid_across_a_restart(open_store, clock):
    """Only acks are remembered for a repeat: a delivery moved to the retry topic is not acked by
    its old handle, before or after a restart (the retry copy is what the consumer gets next)."""
    store = open_store()
    create_topic(store)
    put_bodies(store, b"a")
    [m] = pop(store).messages
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    store.shutdown()
    store = open_store()
    assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    [again] = pop(store).messages
    assert (again.record.body, again.delivery_attempt) == (b"a", 2)
