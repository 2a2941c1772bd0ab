"""PopService (store-side pop / ack / change invisible / DLQ) through a real FileStore.

Time is a ManualClock; dispatch (``store.reput.run_once()``) and redelivery
(``store.pop.revive.run_once()``) are driven by hand, the background revive loop is halted.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from services.domain.format.java_compat import java_string_hash
from services.domain.format.properties_format import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, ORIGIN_MESSAGE_ID
from services.store.errors import StoreNotRunningError
from services.store.metadata.config_files import SubscriptionGroupConfig
from services.store.pop.model import AckStatus, PopResult, PopStatus
from services.store.pop.receipt_handle import ReceiptHandle
from tests.support.filestore import message
from tests.support.store_pop import (
    DLQ,
    GROUP,
    INVISIBLE_MS,
    RETRY,
    TOPIC,
    ack_all,
    bodies,
    committed,
    create_topic,
    pop,
    put,
    put_bodies,
    revive,
)

# -- basics ------------------------------------------------------------------------------------


def test_pop_ack_round_trip(store, clock):
    create_topic(store)
    put_bodies(store, b"m0", b"m1", b"m2")
    result = pop(store)
    assert result.status is PopStatus.FOUND
    assert bodies(result) == [b"m0", b"m1", b"m2"]
    assert [(m.topic, m.source_topic, m.queue_id, m.queue_offset, m.delivery_attempt) for m in result.messages] == [
        (TOPIC, TOPIC, 0, 0, 1),
        (TOPIC, TOPIC, 0, 1, 1),
        (TOPIC, TOPIC, 0, 2, 1),
    ]
    assert set(result.examined) == {(TOPIC, 0), (RETRY, 0)}
    assert len({m.receipt_handle for m in result.messages}) == 3
    assert result.messages[0].record.topic == TOPIC and result.messages[0].raw
    assert sum(store.pop.in_flight_counts().values()) == 3
    assert committed(store) == 0  # the new group's start, committed at its first pop; nothing acked yet
    ack_all(store, result)
    assert committed(store) == 3
    assert sum(store.pop.in_flight_counts().values()) == 0
    empty = pop(store)
    assert empty.status is PopStatus.NO_MESSAGE and not empty.messages
    assert set(empty.examined) == {(TOPIC, 0), (RETRY, 0)}
    clock.advance_ms(INVISIBLE_MS * 2)
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE  # acked messages never come back


def test_group_is_created_with_defaults_on_first_pop(store):
    create_topic(store)
    assert store.groups.get(GROUP) is None
    pop(store)
    config = store.groups.get(GROUP)
    assert config is not None and config.retry_max_times == 16 and not config.consume_message_orderly


def test_two_pops_do_not_return_the_same_in_flight_message(store):
    create_topic(store)
    put_bodies(store, *(b"m%d" % i for i in range(5)))
    first, second, third = pop(store, max_count=2), pop(store, max_count=2), pop(store, max_count=2)
    assert bodies(first) == [b"m0", b"m1"]
    assert bodies(second) == [b"m2", b"m3"]
    assert bodies(third) == [b"m4"]
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert pop(store, group="OtherGroup").status is PopStatus.FOUND  # groups are independent


def test_max_count_is_clamped_to_32(store):
    create_topic(store)
    put_bodies(store, *(b"x" for _ in range(40)))
    assert len(pop(store, max_count=100).messages) == 32


def test_multiple_queues_round_robin(store):
    create_topic(store, queues=4)
    put(store, *(message(TOPIC, q, b"q%d" % q) for q in range(4)))
    put(store, *(message(TOPIC, q, b"q%d-bis" % q) for q in range(4)))
    firsts = [pop(store, max_count=1).messages[0] for _ in range(4)]
    assert sorted(m.queue_id for m in firsts) == [0, 1, 2, 3]
    assert all(m.queue_offset == 0 for m in firsts)
    seconds = [pop(store, max_count=1).messages[0] for _ in range(4)]
    assert sorted(m.queue_id for m in seconds) == [0, 1, 2, 3]
    assert all(m.queue_offset == 1 for m in seconds)
    # A batch spans the queues in turn.
    put(store, *(message(TOPIC, q, b"again") for q in range(4)))
    assert sorted(m.queue_id for m in pop(store).messages) == [0, 1, 2, 3]


def test_explicit_queue_id_reads_that_queue_only(store):
    create_topic(store, queues=2)
    put(store, message(TOPIC, 0, b"zero"), message(TOPIC, 1, b"one"))
    result = pop(store, queue_id=1)
    assert bodies(result) == [b"one"] and result.examined == [(TOPIC, 1)]


def test_concurrent_pops_deliver_each_message_once(store):
    create_topic(store, queues=4)
    put(store, *(message(TOPIC, i % 4, b"%d" % i) for i in range(400)))
    seen: list[bytes] = []
    seen_lock = threading.Lock()

    def consume() -> None:
        while (result := pop(store, max_count=7)).messages:
            ack_all(store, result)
            with seen_lock:
                seen.extend(bodies(result))

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == sorted(b"%d" % i for i in range(400))
    assert [committed(store, queue_id=q) for q in range(4)] == [100] * 4


# -- invisible time, redelivery ------------------------------------------------------------------


def test_expired_message_is_redelivered_through_the_retry_topic(store, clock):
    create_topic(store)
    original = put(store, message(TOPIC, 0, b"payload", tags="TagA", keys="k1 k2", UNIQ_KEY="UNIQ-1", color="red"))[0]
    first = pop(store).messages[0]
    assert first.delivery_attempt == 1
    clock.advance_ms(INVISIBLE_MS - 1)
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE  # still invisible
    clock.advance_ms(1)
    assert store.pop.ack(GROUP, TOPIC, first.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE  # expired
    revive(store)
    assert committed(store) == 1  # the original counts as done once its retry copy is written
    retry_config = store.topics.get(RETRY)
    assert retry_config is not None and retry_config.read_queue_nums == retry_config.write_queue_nums == 1

    second = pop(store).messages[0]
    assert (second.topic, second.source_topic, second.queue_id, second.queue_offset) == (TOPIC, RETRY, 0, 0)
    assert second.delivery_attempt == 2
    record = second.record
    assert record.body == b"payload" and record.reconsume_times == 1
    assert record.properties["RETRY_TOPIC"] == TOPIC
    assert record.properties[ORIGIN_MESSAGE_ID] == original.offset_msg_id
    assert record.properties["UNIQ_KEY"] == "UNIQ-1"
    assert record.properties["TAGS"] == "TagA" and record.properties["KEYS"] == "k1 k2"
    assert record.properties["color"] == "red"
    assert second.receipt_handle != first.receipt_handle

    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    third = pop(store).messages[0]
    assert (third.topic, third.source_topic, third.queue_offset, third.delivery_attempt) == (TOPIC, RETRY, 1, 3)
    assert third.record.properties[ORIGIN_MESSAGE_ID] == original.offset_msg_id  # kept from the first copy
    assert store.pop.ack(GROUP, TOPIC, second.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.ack(GROUP, TOPIC, third.receipt_handle) is AckStatus.OK
    assert committed(store, RETRY) == 2
    clock.advance_ms(INVISIBLE_MS * 2)
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE


def test_change_invisible_duration_extends(store, clock):
    create_topic(store)
    put_bodies(store, b"slow")
    old = pop(store).messages[0].receipt_handle
    clock.advance_ms(INVISIBLE_MS - 1_000)
    status, new = store.pop.change_invisible_duration(GROUP, TOPIC, old, 60_000)
    assert status is AckStatus.OK and new and new != old
    assert store.pop.ack(GROUP, TOPIC, old) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.change_invisible_duration(GROUP, TOPIC, old, 1_000) == (AckStatus.INVALID_RECEIPT_HANDLE, "")
    clock.advance_ms(30_000)  # past the first invisible time, within the new one
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert store.pop.ack(GROUP, TOPIC, new) is AckStatus.OK
    clock.advance_ms(120_000)
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert committed(store) == 1


def test_change_invisible_duration_shortens(store, clock):
    create_topic(store)
    put_bodies(store, b"nack me")
    handle = pop(store, invisible_ms=300_000).messages[0].receipt_handle
    status, new = store.pop.change_invisible_duration(GROUP, TOPIC, handle, 5_000)
    assert status is AckStatus.OK
    clock.advance_ms(5_000)
    assert store.pop.ack(GROUP, TOPIC, new) is AckStatus.INVALID_RECEIPT_HANDLE  # expired now
    revive(store)
    again = pop(store).messages[0]
    assert again.record.body == b"nack me" and again.delivery_attempt == 2 and again.source_topic == RETRY


def test_zero_invisible_duration_is_a_nack(store, clock):
    create_topic(store)
    put_bodies(store, b"nack")
    handle = pop(store).messages[0].receipt_handle
    status, new = store.pop.change_invisible_duration(GROUP, TOPIC, handle, 0)
    assert status is AckStatus.OK and new
    revive(store)
    assert pop(store).messages[0].delivery_attempt == 2


def test_invalid_receipt_handles(store, clock):
    create_topic(store)
    put_bodies(store, b"a", b"b")
    result = pop(store)
    handle = result.messages[0].receipt_handle
    bogus = [
        "",
        "garbage",
        "!!!!",
        "djEgYSBi",
        "x" * 5000,
        ReceiptHandle(TOPIC, 0, 0, clock.now_ms(), INVISIBLE_MS, "00000000", 1).encode(),  # forged
        ReceiptHandle(TOPIC, 0, 9, clock.now_ms(), INVISIBLE_MS, "00000000", 1).encode(),  # unknown offset
    ]
    for text in bogus:
        assert store.pop.ack(GROUP, TOPIC, text) is AckStatus.INVALID_RECEIPT_HANDLE, text
        assert store.pop.change_invisible_duration(GROUP, TOPIC, text, 1)[0] is AckStatus.INVALID_RECEIPT_HANDLE
        assert store.pop.forward_to_dead_letter_queue(GROUP, TOPIC, text) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.ack("OtherGroup", TOPIC, handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.ack(GROUP, "OtherTopic", handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert store.pop.ack(GROUP, TOPIC, handle) is AckStatus.OK
    assert store.pop.ack(GROUP, TOPIC, handle) is AckStatus.OK  # a repeated ack: OK, as RocketMQ answers it
    clock.advance_ms(INVISIBLE_MS)
    assert store.pop.ack(GROUP, TOPIC, result.messages[1].receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE


def test_stale_handle_never_acks_a_later_delivery(store, clock):
    """FIFO redelivers the very same offset: the first delivery's handle must stay dead."""
    create_topic(store)
    put_bodies(store, b"same offset")
    first = pop(store, fifo=True).messages[0]
    clock.advance_ms(INVISIBLE_MS)
    second = pop(store, fifo=True).messages[0]
    assert (second.queue_offset, second.delivery_attempt) == (first.queue_offset, 2)
    assert (
        ReceiptHandle.decode(first.receipt_handle).queue_offset
        == ReceiptHandle.decode(second.receipt_handle).queue_offset
    )
    clock.advance_ms(-INVISIBLE_MS)  # even "unexpired", the old handle names another delivery
    assert store.pop.ack(GROUP, TOPIC, first.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    clock.advance_ms(INVISIBLE_MS)
    assert store.pop.ack(GROUP, TOPIC, second.receipt_handle) is AckStatus.OK


def test_receipt_handle_codec():
    handle = ReceiptHandle("%RETRY%g", 3, 42, 1_700_000_000_000, 30_000, "a1b2c3d4", 7)
    text = handle.encode()
    assert "=" not in text and "/" not in text and "+" not in text
    assert ReceiptHandle.decode(text) == handle
    assert handle.expire_ms == 1_700_000_030_000


# -- max attempts, DLQ --------------------------------------------------------------------------


def test_max_attempts_move_the_message_to_the_dlq(store, clock):
    create_topic(store)
    store.groups.create_or_update(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=2))
    put(store, message(TOPIC, 0, b"poison", tags="T1", UNIQ_KEY="POISON-1"))
    attempts = []
    for _ in range(3):
        result = pop(store)
        attempts += [m.delivery_attempt for m in result.messages]
        clock.advance_ms(INVISIBLE_MS)
        revive(store)
    assert attempts == [1, 2, 3]  # retry_max_times + 1 deliveries
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert committed(store) == 1 and committed(store, RETRY) == 2
    dlq_config = store.topics.get(DLQ)
    assert dlq_config is not None and dlq_config.read_queue_nums == 1

    # The DLQ topic is consumable like any topic, by any group.
    dead = pop(store, group="DlqReader", topic=DLQ).messages
    assert len(dead) == 1
    record = dead[0].record
    assert dead[0].topic == DLQ and record.body == b"poison"
    assert record.properties[DLQ_ORIGIN_TOPIC] == TOPIC
    assert record.properties[DLQ_ORIGIN_MESSAGE_ID] == "POISON-1"
    assert record.properties["UNIQ_KEY"] == "POISON-1" and record.properties["TAGS"] == "T1"
    assert record.reconsume_times == 3
    assert store.pop.ack("DlqReader", DLQ, dead[0].receipt_handle) is AckStatus.OK


def test_default_group_delivers_17_times_then_dead_letters(store, clock):
    create_topic(store)
    put_bodies(store, b"always fails")
    attempts = []
    for _ in range(20):
        attempts += [m.delivery_attempt for m in pop(store).messages]
        clock.advance_ms(INVISIBLE_MS)
        revive(store)
    assert attempts == list(range(1, 18))
    assert bodies(pop(store, group="DlqReader", topic=DLQ)) == [b"always fails"]


def test_forward_to_dead_letter_queue(store, clock):
    create_topic(store)
    put_bodies(store, b"give up", b"fine")
    first, second = pop(store).messages
    assert store.pop.forward_to_dead_letter_queue(GROUP, TOPIC, first.receipt_handle) is AckStatus.OK
    assert store.pop.ack(GROUP, TOPIC, first.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert committed(store) == 1
    store.reput.run_once()
    dead = pop(store, group="DlqReader", topic=DLQ).messages
    assert [m.record.body for m in dead] == [b"give up"]
    assert dead[0].record.properties[DLQ_ORIGIN_TOPIC] == TOPIC
    assert dead[0].record.reconsume_times == 1
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert bodies(pop(store)) == [b"fine"]  # the forwarded one is never redelivered


def test_dlq_messages_retry_within_the_consuming_group(store, clock):
    """A DLQ copy of a retried message carries RETRY_TOPIC of the first group's topic; the
    consuming group's retry must still be routed to the DLQ topic it pops."""
    create_topic(store)
    put_bodies(store, b"retried then dead")
    pop(store)
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    retried = pop(store).messages[0]
    assert store.pop.forward_to_dead_letter_queue(GROUP, TOPIC, retried.receipt_handle) is AckStatus.OK
    store.reput.run_once()
    first = pop(store, group="DlqReader", topic=DLQ).messages
    assert [(m.topic, m.delivery_attempt) for m in first] == [(DLQ, 3)]
    assert first[0].record.properties["RETRY_TOPIC"] == TOPIC
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    again = pop(store, group="DlqReader", topic=DLQ).messages
    assert [(m.topic, m.source_topic, m.delivery_attempt) for m in again] == [(DLQ, "%RETRY%DlqReader_" + DLQ, 4)]
    assert again[0].record.properties["RETRY_TOPIC"] == DLQ


# -- tags ---------------------------------------------------------------------------------------


def test_tag_filter_skips_non_matching_and_counts_them_acked(store, clock):
    create_topic(store)
    put(store, *(message(TOPIC, 0, b"%d" % i, tags=tag) for i, tag in enumerate("ABACB")))
    codes = frozenset({java_string_hash("A"), java_string_hash("C")})
    result = pop(store, tags_codes=codes)
    assert [m.queue_offset for m in result.messages] == [0, 2, 3]
    ack_all(store, result)
    assert committed(store) == 5  # the B messages count as acked
    # Retries are filtered too.
    put(store, message(TOPIC, 0, b"a-again", tags="A"))
    pop(store, tags_codes=codes)
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert pop(store, tags_codes=frozenset({java_string_hash("B")})).status is PopStatus.NO_MESSAGE
    assert committed(store, RETRY) == 1  # skipped by the filter: acked


# -- committed offset, restart ------------------------------------------------------------------


def test_committed_offset_advances_over_the_contiguous_acked_prefix_and_survives_restart(make_store, clock):
    # Without the pop journal (pop_journal_enable off) a restart keeps only the committed offset:
    # tests/store/test_pop_journal.py has the same run with it.
    def open_store():
        store = make_store(pop_journal_enable=False)
        store.pop.revive.halt()
        return store

    store = open_store()
    create_topic(store)
    put_bodies(store, *(b"m%d" % i for i in range(5)))
    popped = pop(store).messages
    for i in (0, 1, 3):
        assert store.pop.ack(GROUP, TOPIC, popped[i].receipt_handle) is AckStatus.OK
    assert committed(store) == 2  # 2 is unacked: 3 is acked but beyond the contiguous prefix
    store.shutdown()

    store = open_store()
    assert committed(store) == 2
    again = pop(store).messages
    assert [(m.queue_offset, m.delivery_attempt) for m in again] == [(2, 1), (3, 1), (4, 1)]
    assert store.pop.ack(GROUP, TOPIC, popped[2].receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    ack_all(store, PopResult(PopStatus.FOUND, again))
    assert committed(store) == 5
    store.shutdown()

    store = open_store()
    assert pop(store).status is PopStatus.NO_MESSAGE


def test_retry_attempts_survive_restart(open_store, clock):
    store = open_store()
    create_topic(store)
    put_bodies(store, b"retried")
    pop(store)
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    store.shutdown()
    store = open_store()
    again = pop(store).messages
    assert [(m.source_topic, m.delivery_attempt) for m in again] == [(RETRY, 2)]


def test_external_offset_change_resets_pop_state(store):
    create_topic(store)
    put_bodies(store, b"a", b"b", b"c")
    handle = pop(store).messages[0].receipt_handle
    store.consumer_offsets.commit_offset(GROUP, TOPIC, 0, 2)  # e.g. an admin reset
    assert [m.queue_offset for m in pop(store).messages] == [2]
    assert store.pop.ack(GROUP, TOPIC, handle) is AckStatus.INVALID_RECEIPT_HANDLE


# -- retry topics: one per (group, topic); the legacy shared one ------------------------------------


def test_each_topic_has_its_own_retry_topic(store, clock):
    create_topic(store, "TopicOne")
    create_topic(store, "TopicTwo")
    put(store, message("TopicOne", 0, b"one"), message("TopicTwo", 0, b"two"))
    pop(store, topic="TopicTwo")
    pop(store, topic="TopicOne")
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    one = pop(store, topic="TopicOne").messages
    assert [(m.topic, m.source_topic, m.record.body, m.delivery_attempt) for m in one] == [
        ("TopicOne", "%RETRY%GroupPop_TopicOne", b"one", 2)
    ]
    ack_all(store, PopResult(PopStatus.FOUND, one))
    assert committed(store, "%RETRY%GroupPop_TopicOne") == 1  # as RocketMQ 5's consumerOffset.json reads
    two = pop(store, topic="TopicTwo").messages
    assert [(m.topic, m.source_topic, m.delivery_attempt) for m in two] == [("TopicTwo", "%RETRY%GroupPop_TopicTwo", 2)]
    ack_all(store, PopResult(PopStatus.FOUND, two))
    assert committed(store, "%RETRY%GroupPop_TopicTwo") == 1
    assert store.topics.get("%RETRY%GroupPop") is None  # the classic retry topic is not used


def test_retries_in_a_legacy_shared_retry_topic_are_still_delivered(store, clock):
    """A store written before issue 15 kept every topic's retries in ``%RETRY%{group}``, routed
    by RETRY_TOPIC: a pop still drains them, each topic its own, then retries go per topic."""
    legacy = "%RETRY%" + GROUP
    create_topic(store)
    create_topic(store, "TopicOther")
    create_topic(store, legacy)
    put(
        store,
        replace(message(legacy, 0, b"other", RETRY_TOPIC="TopicOther"), reconsume_times=1),
        replace(message(legacy, 0, b"mine", RETRY_TOPIC=TOPIC), reconsume_times=1),
    )
    [mine] = pop(store).messages
    assert (mine.topic, mine.source_topic, mine.record.body, mine.delivery_attempt) == (TOPIC, legacy, b"mine", 2)
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # expired again: the next copy goes to the per-topic retry topic
    [again] = pop(store).messages
    assert (again.source_topic, again.record.body, again.delivery_attempt) == (RETRY, b"mine", 3)
    ack_all(store, PopResult(PopStatus.FOUND, [again]))
    [other] = pop(store, topic="TopicOther").messages
    assert (other.topic, other.source_topic, other.record.body) == ("TopicOther", legacy, b"other")
    ack_all(store, PopResult(PopStatus.FOUND, [other]))
    assert committed(store, legacy) == 2


# -- FIFO ---------------------------------------------------------------------------------------


def test_fifo_locks_the_queue_while_in_flight_and_serves_other_queues(store):
    create_topic(store, queues=2)
    put(store, *(message(TOPIC, 0, b"q0-%d" % i) for i in range(3)))
    put(store, *(message(TOPIC, 1, b"q1-%d" % i) for i in range(3)))
    first = pop(store, queue_id=0, max_count=2, fifo=True)
    assert bodies(first) == [b"q0-0", b"q0-1"]
    assert pop(store, queue_id=0, fifo=True).status is PopStatus.NO_MESSAGE  # locked
    other = pop(store, fifo=True)
    assert {m.queue_id for m in other.messages} == {1}  # queue 0 is skipped, queue 1 is served
    assert store.pop.ack(GROUP, TOPIC, first.messages[0].receipt_handle) is AckStatus.OK
    assert pop(store, queue_id=0, fifo=True).status is PopStatus.NO_MESSAGE  # one still in flight
    assert store.pop.ack(GROUP, TOPIC, first.messages[1].receipt_handle) is AckStatus.OK
    assert bodies(pop(store, queue_id=0, fifo=True)) == [b"q0-2"]


def test_fifo_redelivers_in_order_from_the_same_offset(store, clock):
    create_topic(store)
    put_bodies(store, b"m0", b"m1", b"m2", b"m3")
    first = pop(store, max_count=3, fifo=True).messages
    assert store.pop.ack(GROUP, TOPIC, first[0].receipt_handle) is AckStatus.OK
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert store.topics.get(RETRY) is None  # FIFO never uses the retry topic
    again = pop(store, fifo=True).messages
    assert [(m.queue_offset, m.delivery_attempt, m.source_topic) for m in again] == [
        (1, 2, TOPIC),
        (2, 2, TOPIC),
        (3, 1, TOPIC),
    ]
    assert store.pop.ack(GROUP, TOPIC, first[1].receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    ack_all(store, PopResult(PopStatus.FOUND, again))
    assert committed(store) == 4


def test_fifo_after_max_attempts_goes_to_the_dlq_and_the_queue_moves_on(store, clock):
    create_topic(store)
    store.groups.create_or_update(
        SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1, consume_message_orderly=True)
    )
    put_bodies(store, b"poison", b"next")
    assert [m.delivery_attempt for m in pop(store, max_count=1).messages] == [1]  # the group is FIFO
    assert pop(store).status is PopStatus.NO_MESSAGE  # locked
    clock.advance_ms(INVISIBLE_MS)
    assert [(m.record.body, m.delivery_attempt) for m in pop(store, max_count=1).messages] == [(b"poison", 2)]
    clock.advance_ms(INVISIBLE_MS)
    assert pop(store).status is PopStatus.NO_MESSAGE  # exhausted: waits for the revive service
    revive(store)
    assert [(m.record.body, m.delivery_attempt) for m in pop(store).messages] == [(b"next", 1)]
    assert committed(store) == 1
    dead = pop(store, group="DlqReader", topic=DLQ).messages
    assert [(m.record.body, m.record.reconsume_times) for m in dead] == [(b"poison", 2)]


def test_fifo_unlock_is_announced_to_arrival_listeners(store, clock):
    create_topic(store)
    put_bodies(store, b"m0", b"m1")
    seen = []
    # (the pop journal's own records arrive on the bus too: rmq_sys_POP_JOURNAL, left out here)
    store.add_arrival_listener(lambda arrivals: seen.extend(a for a in arrivals if a.topic == TOPIC))
    first = pop(store, max_count=1, fifo=True).messages[0]
    store.pop.ack(GROUP, TOPIC, first.receipt_handle)
    assert [(a.topic, a.queue_id, a.max_offset) for a in seen] == [(TOPIC, 0, 2)]
    pop(store, max_count=1, fifo=True)
    clock.advance_ms(INVISIBLE_MS)
    store.pop.revive.run_once()
    assert [(a.topic, a.queue_id) for a in seen] == [(TOPIC, 0), (TOPIC, 0)]


# -- arguments, lifecycle -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(group=""),
        dict(group="bad group"),
        dict(topic=""),
        dict(topic="bad/topic"),
        dict(queue_id=-2),
        dict(max_count=0),
        dict(invisible_ms=-1),
        dict(invisible_ms=10**12),
    ],
)
def test_bad_arguments_raise_value_error(store, kwargs):
    create_topic(store)
    with pytest.raises(ValueError):
        pop(store, **kwargs)


def test_store_not_running(store):
    create_topic(store)
    put_bodies(store, b"x")
    handle = pop(store).messages[0].receipt_handle
    store.shutdown()
    with pytest.raises(StoreNotRunningError):
        pop(store)
    with pytest.raises(StoreNotRunningError):
        store.pop.ack(GROUP, TOPIC, handle)
    assert store.pop.revive.run_once() == 0
