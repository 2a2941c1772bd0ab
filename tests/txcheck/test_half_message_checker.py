"""The check algorithm on a manual clock: a real store underneath (behind the store client), the
broker's own EndTransaction core writing commits and op records (tests/support/txcheck_world.py)."""

from __future__ import annotations

import pytest

from services.broker.transaction import Resolution
from services.domain.contracts.transaction import parse_op_body
from services.domain.names import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import MessageToPut, StoredMessage
from services.txcheck.model import CheckOutcome
from services.txcheck.op_records import OpTracker
from tests.support.txcheck_world import INTERVAL_MS, TIMEOUT_MS

COMMIT, ROLLBACK = Resolution.COMMIT, Resolution.ROLLBACK


def results(checker) -> dict[str, int]:
    return dict(checker.stats().results)


def op(queue_offset: int, body: bytes, tag: str = "d") -> StoredMessage:
    return StoredMessage(
        topic=TRANS_OP_HALF_TOPIC,
        queue_id=0,
        body=body,
        properties={"TAGS": tag},
        queue_offset=queue_offset,
        phy_offset=0,
    )


# -- op records ---------------------------------------------------------------------------------
def test_op_bodies_are_split_on_commas():
    assert parse_op_body(b"7") == [7]  # 4.x: one offset
    assert parse_op_body(b"1,2,30,") == [1, 2, 30]  # 5.x: batched, each followed by ","
    assert parse_op_body(b",x,5,,-1, 6 ,") == [5, 6]  # garbage and empty pieces are skipped


def test_op_tracker_maps_offsets_and_computes_the_op_offset():
    tracker = OpTracker(start_offset=10, floor=100)
    tracker.add(op(10, b"99,"))  # only below the floor: done already
    tracker.add(op(11, b"100,104,"))
    tracker.add(op(12, b"101,", tag="x"))  # not a remove op: ignored
    tracker.add(op(13, b"102,"))
    assert [tracker.is_resolved(h) for h in (99, 100, 101, 102, 104)] == [False, True, False, True, True]
    assert tracker.next_op_offset(100) == 11  # op 11 still lists 100 and 104
    assert tracker.next_op_offset(103) == 11  # ... 104 is not passed yet
    assert tracker.next_op_offset(105) == 14  # all passed: the read position
    tracker.skip_to(20)
    assert tracker.read_offset == 20


# -- timeout and immunity -------------------------------------------------------------------------
def test_a_half_is_checked_once_older_than_the_timeout(world):
    world.broker.send_half("TX1")
    checker = world.checker()
    world.advance(TIMEOUT_MS - 1)
    checker.run_once()
    assert (
        world.producers.asked == [] and world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == -1
    )
    world.advance(2)
    checker.run_once()
    [request] = world.producers.requests
    assert (request.producer_group, request.topic, request.message_id, request.transaction_id) == (
        "TxTopic",
        "TxTopic",
        "TX1",
        "TX1",
    )
    original, copy = world.halves()
    assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1" and "TRANSACTION_CHECK_TIMES" not in original.properties
    assert copy.body == original.body and copy.born_timestamp_ms == original.born_timestamp_ms
    assert (request.half.queue_offset, request.half.phy_offset) == (copy.queue_offset, copy.phy_offset)
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1
    checker.run_once()  # the copy was appended in this round: not again at once
    assert world.producers.asked == ["TX1"]
    world.advance(INTERVAL_MS)
    checker.run_once()  # no answer: asked again every interval
    assert world.producers.asked == ["TX1", "TX1"] and world.halves()[-1].properties["TRANSACTION_CHECK_TIMES"] == "2"
    assert checker.stats().checks_sent == 2 and results(checker)["unknown"] == 1


def test_a_young_half_stops_the_pass(world):
    world.broker.send_half("OLD")
    world.advance(TIMEOUT_MS + 1)
    world.broker.send_half("YOUNG")
    world.advance(1)
    checker = world.checker()
    checker.run_once()
    assert world.producers.asked == ["OLD"]
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1  # parked at YOUNG
    world.advance(TIMEOUT_MS)
    checker.run_once()  # an early pass: YOUNG is due, OLD's copy is not
    assert world.producers.asked == ["OLD", "YOUNG"]
    world.advance(INTERVAL_MS)
    checker.run_once()
    assert world.producers.asked == ["OLD", "YOUNG", "OLD", "YOUNG"]


def test_check_immunity_time_delays_the_check_without_holding_the_queue(world):
    world.broker.send_half("IMMUNE", CHECK_IMMUNITY_TIME_IN_SECONDS="60")
    world.broker.send_half("PLAIN")
    checker = world.checker()
    world.advance(TIMEOUT_MS + 1)
    checker.run_once()
    assert world.producers.asked == ["PLAIN"]
    pushed = [h for h in world.halves() if h.properties["UNIQ_KEY"] == "IMMUNE"][-1]
    assert pushed.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0" and "TRANSACTION_CHECK_TIMES" not in pushed.properties
    assert checker.stats().immunity_pushbacks == 1
    world.advance(INTERVAL_MS)  # 36 s: still immune, pushed back again (keeps the first offset)
    checker.run_once()
    assert world.producers.asked.count("IMMUNE") == 0
    assert [
        h.properties.get("TRAN_PREPARED_QUEUE_OFFSET") for h in world.halves() if h.properties["UNIQ_KEY"] == "IMMUNE"
    ] == [None, "0", "0"]
    world.advance(INTERVAL_MS)  # 66 s: due
    checker.run_once()
    assert world.producers.asked.count("IMMUNE") == 1


def test_an_immunity_below_the_timeout_means_the_timeout(world):
    world.broker.send_half("TX", CHECK_IMMUNITY_TIME_IN_SECONDS="1")
    checker = world.checker()
    world.advance(2_000)
    checker.run_once()
    assert world.producers.asked == []
    world.advance(TIMEOUT_MS)
    checker.run_once()
    assert world.producers.asked == ["TX"]


def test_a_producer_clock_running_ahead_does_not_hide_a_half(world):
    world.broker.send_half("TX")
    record = world.halves()[0]
    assert record.born_timestamp_ms == record.store_timestamp_ms
    world.store.append(
        MessageToPut(
            topic=TRANS_HALF_TOPIC,
            queue_id=0,
            body=b"b",
            properties={**record.properties, "UNIQ_KEY": "AHEAD", "__transactionId__": "AHEAD"},
            born_timestamp_ms=record.born_timestamp_ms + 3_600_000,
        )
    )
    world.advance(TIMEOUT_MS + 1)
    world.checker().run_once()
    assert world.producers.asked == ["TX", "AHEAD"]


# -- op matching ----------------------------------------------------------------------------------
def test_halves_resolved_by_the_client_are_never_checked(world):
    for tid in ("A", "B", "C"):
        world.broker.send_half(tid)
    world.broker.end("A", COMMIT)
    world.broker.end("C", ROLLBACK)
    world.advance(TIMEOUT_MS + 1)
    checker = world.checker()
    checker.run_once()
    assert world.producers.asked == ["B"]
    assert checker.stats().resolved == 2
    assert [r.properties["UNIQ_KEY"] for r in world.delivered()] == ["A"]


def test_a_batched_op_body_resolves_every_offset_it_lists(world):
    for tid in ("A", "B", "C", "D"):
        world.broker.send_half(tid)
    world.store.append(
        MessageToPut(topic=TRANS_OP_HALF_TOPIC, queue_id=0, body=b"0,1,3,", properties={"WAIT": "true", "TAGS": "d"})
    )
    world.store.append(MessageToPut(topic=TRANS_OP_HALF_TOPIC, queue_id=0, body=b"2,", properties={"TAGS": "other"}))
    world.advance(TIMEOUT_MS + 1)
    checker = world.checker()
    checker.run_once()
    assert world.producers.asked == ["C"]
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 4
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == 2  # both op records consumed


def test_op_offset_waits_for_ops_of_halves_not_passed_yet(world):
    world.broker.send_half("OLD")
    world.advance(TIMEOUT_MS + 1)
    world.broker.send_half("YOUNG")  # half 1: the pass stops here
    world.broker.send_half("DONE")  # half 2
    world.broker.end("DONE", COMMIT)  # op 0 lists half 2, not passed yet
    world.broker.end("OLD", ROLLBACK)  # op 1 lists half 0
    world.checker().run_once()
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1
    assert (
        world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) <= 0
    )  # op 0 still matters after a restart
    world.advance(TIMEOUT_MS)
    world.checker().run_once()  # a fresh instance: a restart
    assert world.producers.asked == ["YOUNG"]  # DONE is known to be resolved
    assert (
        world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 3
        and world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == 2
    )


def test_an_op_written_during_the_pass_is_seen_before_checking(world):
    world.broker.send_half("A")
    world.broker.send_half("B")
    world.advance(TIMEOUT_MS + 1)
    # The producer answers A's check by also committing B (as a client commit racing the pass).
    world.producers.answer = lambda request: (world.broker.end("B", COMMIT), COMMIT)[1]
    world.checker().run_once()
    assert world.producers.asked == ["A"]
    assert sorted(r.properties["UNIQ_KEY"] for r in world.delivered()) == ["A", "B"]


# -- answers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("answer,delivered,result", [(COMMIT, ["TX"], "commit"), (ROLLBACK, [], "rollback")])
def test_the_producers_answer_commits_or_rolls_back(world, answer, delivered, result):
    world.broker.send_half("TX", body=b"pay 5")
    world.producers.answer = lambda request: answer
    checker = world.checker()
    world.advance(TIMEOUT_MS + 1)
    checker.run_once()
    assert [r.properties["UNIQ_KEY"] for r in world.delivered()] == delivered
    for _ in range(3):
        world.advance(INTERVAL_MS)
        checker.run_once()
    assert world.producers.asked == ["TX"]  # settled: never asked again
    assert results(checker) == {"commit": 0, "rollback": 0, "unknown": 0, result: 1}
    if delivered:
        [committed] = world.delivered()
        assert committed.body == b"pay 5" and committed.sys_flag & 0xC == 0x8
        assert committed.prepared_transaction_offset == world.halves()[1].phy_offset  # the copy asked about
    assert world.moved() == []


def test_a_late_client_commit_covers_the_check_copy(world):
    world.broker.send_half("TX")
    checker = world.checker()
    world.advance(TIMEOUT_MS + 1)
    checker.run_once()  # checked; the producer does not answer
    world.broker.end("TX", COMMIT)  # ... but the client commits later: every copy is listed
    [op_record] = world.ops()
    assert op_record.body == b"0,1,"
    world.advance(INTERVAL_MS)
    checker.run_once()
    assert world.producers.asked == ["TX"] and len(world.delivered()) == 1


def test_an_answer_after_the_resolution_covers_the_new_copy_without_a_second_commit(world):
    world.broker.send_half("TX")
    world.producers.answer = lambda request: None
    checker = world.checker()
    world.advance(TIMEOUT_MS + 1)
    checker.run_once()  # copy 1 asked, no answer yet
    world.broker.end("TX", COMMIT)  # the client's commit covers halves 0 and 1
    world.producers.answer = lambda request: COMMIT
    world.broker.end("TX", COMMIT, via=world.producers.requests[0])  # the late answer: nothing new
    assert len(world.ops()) == 1 and len(world.delivered()) == 1


# -- max checks and no producer -------------------------------------------------------------------
def test_after_check_max_checks_the_half_moves_to_the_max_time_topic(world):
    world.broker.send_half("STUCK", body=b"never")
    checker = world.checker(check_max=15)
    world.advance(TIMEOUT_MS + 1)
    for _ in range(20):
        checker.run_once()
        world.advance(INTERVAL_MS)
    assert world.producers.asked == ["STUCK"] * 15
    [moved] = world.moved()
    assert moved.body == b"never" and moved.properties["TRANSACTION_CHECK_TIMES"] == "15"
    assert moved.properties["REAL_TOPIC"] == "TxTopic" and world.delivered() == []
    stats = checker.stats()
    assert stats.moved_to_max_time_topic == 1 and stats.checks_sent == 15 and stats.half_lag == 0


def test_without_a_producer_the_check_is_retried_and_not_counted(world):
    world.broker.send_half("TX")
    world.producers.outcome = CheckOutcome.NO_PRODUCER
    checker = world.checker(check_max=3)
    world.advance(TIMEOUT_MS + 1)
    for _ in range(6):
        checker.run_once()
        world.advance(INTERVAL_MS)
    assert world.producers.asked == ["TX"] * 6 and world.moved() == []
    assert checker.stats().no_producer_retries == 6 and checker.stats().checks_sent == 0
    world.producers.outcome = CheckOutcome.SENT  # a producer connects and commits
    world.producers.answer = lambda request: COMMIT
    checker.run_once()
    world.advance(INTERVAL_MS)
    checker.run_once()
    assert len(world.producers.requests) == 7 and len(world.delivered()) == 1 and world.moved() == []


def test_unreachable_brokers_count_as_retries(world):
    world.broker.send_half("TX")
    world.producers.outcome = CheckOutcome.UNREACHABLE
    checker = world.checker(check_max=1)
    world.advance(TIMEOUT_MS + 1)
    for _ in range(3):
        checker.run_once()
        world.advance(INTERVAL_MS)
    assert world.moved() == [] and checker.stats().broker_unreachable_retries == 3


def test_a_half_past_retention_is_moved_not_checked(world):
    world.broker.send_half("ANCIENT")
    world.advance(72 * 3_600_000 + 1)
    world.checker().run_once()
    assert world.producers.asked == [] and len(world.moved()) == 1


# -- restarts and crashes -------------------------------------------------------------------------
def test_a_restart_asks_nothing_settled_and_forgets_nothing_open(world):
    for tid in ("C1", "R1", "OPEN", "C2"):
        world.broker.send_half(tid)
    world.producers.answer = lambda request: {"C1": COMMIT, "R1": ROLLBACK, "C2": COMMIT}.get(request.transaction_id)
    world.advance(TIMEOUT_MS + 1)
    world.checker().run_once()
    assert world.producers.asked == ["C1", "R1", "OPEN", "C2"]
    world.persist_offsets()
    world.crash_store()  # the store crashes too: offsets as last persisted
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 4
    world.advance(INTERVAL_MS)
    restarted = world.checker()
    restarted.run_once()
    assert world.producers.asked[4:] == ["OPEN"]
    assert sorted(r.properties["UNIQ_KEY"] for r in world.delivered()) == ["C1", "C2"]


def test_a_store_crash_losing_the_offsets_only_repeats_work(world):
    for tid in ("A", "B"):
        world.broker.send_half(tid)
    world.producers.answer = lambda request: COMMIT
    world.advance(TIMEOUT_MS + 1)
    world.checker().run_once()
    world.crash_store()  # nothing was persisted: offsets back to none
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == -1
    assert world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == -1
    world.advance(INTERVAL_MS)
    world.checker().run_once()
    assert world.producers.asked == ["A", "B"]  # the op records still settle both
    assert sorted(r.properties["UNIQ_KEY"] for r in world.delivered()) == ["A", "B"]


def _crash_run(world, crash_at: int) -> None:
    for tid in ("A", "B", "C"):
        world.broker.send_half(tid)
    world.broker.send_half("R")
    world.producers.answer = lambda request: ROLLBACK if request.transaction_id == "R" else COMMIT
    world.advance(TIMEOUT_MS + 1)
    world.store.fail_after = crash_at
    try:
        world.checker().run_once()  # "killed" at its crash_at-th store call (if it makes that many)
    except StoreUnavailableError:
        pass
    world.store.fail_after = None
    for _ in range(3):
        world.advance(INTERVAL_MS)
        world.checker().run_once()  # a new process each time


@pytest.mark.parametrize("crash_at", range(26))
def test_a_crash_at_any_store_call_loses_nothing(world, crash_at):
    _crash_run(world, crash_at)
    assert sorted(r.properties["UNIQ_KEY"] for r in world.delivered()) == ["A", "B", "C"]
    assert world.moved() == []
    checker = world.checker()
    asked = len(world.producers.requests)
    world.advance(INTERVAL_MS)
    checker.run_once()
    assert len(world.producers.requests) == asked  # nothing open is left
    assert checker.stats().half_lag == 0 and checker.stats().op_lag == 0


def test_a_pass_cut_short_by_its_budget_continues_to_the_same_end(world):
    for tid in ("A", "B", "C"):
        world.broker.send_half(tid)
    world.advance(TIMEOUT_MS + 1)
    checker = world.checker(pass_halves_max=2)
    checker.run_once()
    assert world.producers.asked == ["A", "B"] and not checker.round_complete
    checker.run_once()  # continues with C, not with the copies of A and B
    assert world.producers.asked == ["A", "B", "C"] and checker.round_complete


def test_a_committed_offset_beyond_the_queue_end_restarts_from_the_beginning(world):
    world.store.commit_consumer_offset(
        TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, 50
    )  # the store lost the half queue's tail
    world.store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, 50)
    world.broker.send_half("TX")
    world.advance(TIMEOUT_MS + 1)
    world.checker().run_once()
    assert world.producers.asked == ["TX"]


def test_a_lost_queue_tail_rescans_without_asking_settled_transactions(world):
    world.broker.send_half("SETTLED")
    world.broker.end("SETTLED", COMMIT)
    world.store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, 60)
    world.store.commit_consumer_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, 60)
    world.advance(TIMEOUT_MS + 1)
    checker = world.checker()
    checker.run_once()
    assert (
        world.producers.asked == [] and world.store.query_consumer_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1
    )
