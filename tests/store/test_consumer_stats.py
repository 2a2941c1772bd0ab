"""consumer_stats in the core: lag, in-flight, ready (not handed out yet) and dead-lettered
messages per (group, topic), after real pops, acks, revives and DLQ moves on a ManualClock."""

from __future__ import annotations

from services.store.metadata.config_files import SubscriptionGroupConfig
from services.store.metadata.consumer_stats import ConsumerStats, consumer_stats
from services.store.pop.model import AckStatus
from tests.support.filestore import message
from tests.support.store_pop import GROUP, INVISIBLE_MS, RETRY, TOPIC, create_topic, pop, put, put_bodies, revive


def stats_of(store, topic: str = TOPIC, group: str = GROUP) -> ConsumerStats:
    [row] = [s for s in consumer_stats(store) if (s.group, s.topic) == (group, topic)]
    return row


def test_ready_messages_are_the_backlog_not_yet_handed_out(store, clock):
    create_topic(store, queues=2)
    put_bodies(store, b"a", b"b", b"c", queue_id=0)
    put_bodies(store, b"d", b"e", queue_id=1)
    assert [m.record.body for m in pop(store, queue_id=0, max_count=2).messages] == [b"a", b"b"]
    # queue 0 popped up to offset 2 of 3; queue 1 committed at 0 by no pop of it yet: not there
    row = stats_of(store)
    assert (row.lag_messages, row.inflight_messages, row.ready_messages) == (3, 2, 1)
    got = pop(store, queue_id=1).messages
    assert [m.record.body for m in got] == [b"d", b"e"]
    assert store.pop.ack(GROUP, TOPIC, got[0].receipt_handle) is AckStatus.OK
    row = stats_of(store)
    assert (row.lag_messages, row.inflight_messages, row.ready_messages) == (4, 3, 1)
    put_bodies(store, b"f", b"g", queue_id=1)  # new arrivals are ready at once
    assert stats_of(store).ready_messages == 3


def test_ready_messages_without_pop_state_start_at_the_committed_offset(store, clock):
    create_topic(store)
    put_bodies(store, b"a", b"b", b"c", b"d")
    store.pop.commit_offset(GROUP, TOPIC, 0, 1)  # e.g. CommitConsumerOffset; no pop since
    row = stats_of(store)
    assert (row.lag_messages, row.inflight_messages, row.ready_messages) == (3, 0, 3)


def test_expired_messages_are_ready_again_in_the_retry_topic_or_their_fifo_queue(store, clock):
    create_topic(store)
    put_bodies(store, b"late", b"later")
    pop(store, max_count=1)
    assert stats_of(store).ready_messages == 1
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # non-FIFO: a copy in the group's retry topic
    # The group's offsets in the retry topic begin with its next pop (as its lag's): one of the
    # two ready messages is handed out, the other is ready in its topic or in the retry topic.
    [got] = pop(store, max_count=1).messages
    ready = stats_of(store).ready_messages + stats_of(store, RETRY).ready_messages
    assert ready == 1 and stats_of(store, got.source_topic).inflight_messages == 1

    create_topic(store, "FifoPop")
    put(store, message("FifoPop", 0, b"ordered"))
    pop(store, topic="FifoPop", fifo=True)
    assert stats_of(store, "FifoPop").ready_messages == 0
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # FIFO: delivered again from the same offset
    row = stats_of(store, "FifoPop")
    assert (row.inflight_messages, row.ready_messages) == (0, 1)


def test_dead_lettered_messages_count_by_group_and_topic_consumed(store, clock):
    create_topic(store)
    store.groups.create_or_update(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1))
    put_bodies(store, b"poison", b"given up")
    first, second = pop(store).messages
    assert store.pop.forward_to_dead_letter_queue(GROUP, TOPIC, second.receipt_handle) is AckStatus.OK
    assert stats_of(store).dlq_messages == 1
    for _ in range(2):  # retry_max_times + 1 deliveries of the first, then the DLQ
        clock.advance_ms(INVISIBLE_MS)
        revive(store)
        pop(store)
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert stats_of(store).dlq_messages == 2  # the retry copy's DLQ move counts for the topic consumed
    assert stats_of(store, RETRY).dlq_messages == 0
    assert [s.dlq_messages for s in consumer_stats(store, group="Other")] == []
