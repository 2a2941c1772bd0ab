"""Where a consumer group new to a queue starts (services/store/pop/consume_init.py, RocketMQ's getInitOffset),
through a real FileStore's pop engine.

``access_message_in_memory_max_ratio=0`` stands for "the queue's first message is no longer in
memory" (a topic with a week of history); the default ratio (40 % of physical memory) keeps the
few bytes a test writes "in memory" (a fresh topic).
"""

from __future__ import annotations

import pytest

from services.store.config import ConsumeInitMode
from services.store.pop.consume_init import ConsumeInitOffsets, physical_memory_bytes
from services.store.pop.model import AckStatus, PopStatus
from tests.support.filestore import message, small_config
from tests.support.store_pop import (
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

HISTORY = [b"old%d" % i for i in range(10)]


@pytest.fixture
def history_store(make_store):
    """A FileStore in which no queue's first message counts as in memory any more."""

    def open_(**overrides):
        store = make_store(access_message_in_memory_max_ratio=0.0, **overrides)
        store.pop.revive.halt()
        return store

    return open_


def test_new_group_on_a_fresh_topic_receives_what_was_sent_before_its_first_pop(store):
    create_topic(store)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store)) == HISTORY
    assert committed(store) == 0  # its start, committed at the first pop


def test_new_group_on_a_topic_with_history_starts_at_the_last_message_not_the_beginning(history_store):
    store = history_store()
    create_topic(store)
    put_bodies(store, *HISTORY)
    first = pop(store)
    assert bodies(first) == [b"old9"]  # RocketMQ: "pop last one, then commit offset"
    assert committed(store) == 9
    ack_all(store, first)
    put_bodies(store, b"new")
    assert bodies(pop(store)) == [b"new"]
    assert committed(store) == 10


def test_an_existing_group_keeps_its_offset(history_store):
    store = history_store()
    create_topic(store)
    store.consumer_offsets.commit_offset(GROUP, TOPIC, 0, 3)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store)) == HISTORY[3:]


def test_min_mode_starts_at_the_min_offset(history_store):
    store = history_store(consume_init_mode=ConsumeInitMode.MIN)
    create_topic(store)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store)) == HISTORY
    assert committed(store) == 0


def test_the_in_memory_check_can_be_turned_off(make_store):
    store = make_store(init_pop_offset_by_check_msg_in_mem=False)
    store.pop.revive.halt()
    create_topic(store)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store)) == [b"old9"]


def test_empty_queue_starts_at_zero_and_receives_the_first_message(history_store):
    store = history_store()
    create_topic(store)
    assert pop(store).status is PopStatus.NO_MESSAGE
    assert committed(store) == 0
    put_bodies(store, b"first", b"second")
    assert bodies(pop(store)) == [b"first", b"second"]


def test_every_queue_of_the_topic_is_started_at_the_first_pop_even_past_a_full_batch(history_store):
    store = history_store()
    create_topic(store, queues=3)
    for queue_id in range(3):
        put(store, *(message(TOPIC, queue_id, b"q%d-%d" % (queue_id, i)) for i in range(4)))
    popped = pop(store, max_count=1)
    assert len(popped.messages) == 1
    assert [committed(store, queue_id=q) for q in range(3)] == [3, 3, 3]
    assert committed(store, topic=RETRY) == -1  # the group's retry topic does not exist yet
    for queue_id in range(3):  # sent after the first pop: never skipped, whichever queue it is in
        put(store, message(TOPIC, queue_id, b"after-%d" % queue_id))
    received = bodies(popped) + bodies(pop(store)) + bodies(pop(store))
    assert sorted(received) == sorted([b"q0-3", b"q1-3", b"q2-3", b"after-0", b"after-1", b"after-2"])


def test_the_retry_queue_starts_at_its_min_offset(history_store, clock):
    store = history_store()
    create_topic(store)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store)) == [b"old9"]
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # old9 moves into %RETRY%GroupPop
    again = pop(store)
    assert [(m.source_topic, m.record.body, m.delivery_attempt) for m in again.messages] == [(RETRY, b"old9", 2)]


def test_a_fifo_group_starts_at_the_last_message_too(history_store):
    store = history_store()
    create_topic(store)
    put_bodies(store, *HISTORY)
    assert bodies(pop(store, fifo=True)) == [b"old9"]


def test_a_group_whose_offsets_were_removed_starts_again(history_store):
    store = history_store()
    create_topic(store)
    put_bodies(store, *HISTORY[:5])
    ack_all(store, pop(store))
    put_bodies(store, *HISTORY[5:])
    store.consumer_offsets.remove_group(GROUP)
    assert bodies(pop(store)) == [b"old9"]
    assert committed(store) == 9


def test_commit_offset_moves_the_group_and_kills_in_flight_handles(store):
    create_topic(store)
    put_bodies(store, *HISTORY)
    popped = pop(store, max_count=3)
    store.pop.commit_offset(GROUP, TOPIC, 0, 8)  # e.g. pyrmq consumer reset
    for m in popped.messages:  # acks of the earlier deliveries must not move it back
        assert store.pop.ack(GROUP, TOPIC, m.receipt_handle) is AckStatus.INVALID_RECEIPT_HANDLE
    assert committed(store) == 8
    assert bodies(pop(store)) == [b"old8", b"old9"]
    store.pop.commit_offset(GROUP, TOPIC, 0, 0)  # back to the beginning
    assert bodies(pop(store)) == HISTORY


def test_in_memory_means_within_the_ratio_of_physical_memory_of_the_commitlog_end(make_store):
    window_bytes = 4096
    store = make_store(access_message_in_memory_max_ratio=window_bytes / physical_memory_bytes())
    init = ConsumeInitOffsets(store.config, store.commitlog, store.find_queue)
    assert abs(init.in_memory_max_bytes - window_bytes) <= 1
    create_topic(store)
    put_bodies(store, b"x" * 100)
    assert init.in_memory(TOPIC, 0, 0)
    assert init.init_offset(TOPIC, 0) == 0
    while store.commitlog.max_offset < 2 * window_bytes:
        put_bodies(store, b"y" * 100)
    assert not init.in_memory(TOPIC, 0, 0)
    assert init.in_memory(TOPIC, 0, store.max_offset_in_queue(TOPIC, 0) - 1)
    assert init.init_offset(TOPIC, 0) == store.max_offset_in_queue(TOPIC, 0) - 1
    assert not init.in_memory(TOPIC, 0, store.max_offset_in_queue(TOPIC, 0))  # no message there
    assert init.init_offset("NoSuchTopic", 0) == 0


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_ratio_must_be_a_fraction(tmp_path, ratio):
    with pytest.raises(ValueError, match="access_message_in_memory_max_ratio"):
        small_config(tmp_path, access_message_in_memory_max_ratio=ratio)
