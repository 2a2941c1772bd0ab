"""Priority pops (RIP-80) in the store's pop engine: a PRIORITY topic's backlog is handed out
from its highest queue (level) down, redeliveries after the fresh backlog, FIFO pops and other
topics keep the rotation, and a group's ``priority.factor`` sets the share of its pops that go in
priority order."""

from __future__ import annotations

from services.domain.format.properties_format import PRIORITY
from services.domain.topic_types import PRIORITY_FACTOR_ATTRIBUTE
from services.store.metadata.config_files import SubscriptionGroupConfig, TopicConfig
from tests.support.filestore import message
from tests.support.store_pop import GROUP, INVISIBLE_MS, RETRY, TOPIC, ack_all, pop, put, revive

LEVELS = 10


def create_priority_topic(store, topic: str = TOPIC, message_type: str = "PRIORITY") -> None:
    config = TopicConfig(topic_name=topic, read_queue_nums=LEVELS, write_queue_nums=LEVELS)
    config.message_type = message_type
    store.topics.create_or_update(config)


def put_levels(store, levels: list[int], topic: str = TOPIC) -> None:
    """One message per entry, stored in queue ``level`` with its priority, in the order given."""
    records = []
    for i, level in enumerate(levels):
        record = message(topic, level, f"p{level}-{i}".encode())
        record.properties[PRIORITY] = str(level)
        records.append(record)
    put(store, *records)


def levels_of(result) -> list[int]:
    return [int(m.record.properties[PRIORITY]) for m in result.messages]


def test_a_backlog_comes_out_highest_priority_first(store):
    create_priority_topic(store)
    sent = [3, 0, 9, 5, 9, 1, 7, 2, 8, 4, 6, 0, 5]
    put_levels(store, sent)
    pop(store, max_count=1)  # the new group's first pop commits its start on every queue
    handed: list[int] = []
    for _ in range(len(sent)):
        result = pop(store, max_count=1)
        handed += levels_of(result)
        ack_all(store, result)
    # the first pop took the top message; the rest follow level by level, each queue in order
    assert handed[: len(sent) - 1] == sorted(sent, reverse=True)[1:]


def test_one_batch_is_filled_from_the_top_level_down(store):
    create_priority_topic(store)
    put_levels(store, [1, 4, 4, 8, 0, 8, 2])
    result = pop(store, max_count=5)
    assert levels_of(result) == [8, 8, 4, 4, 2]
    assert [m.queue_id for m in result.messages] == [8, 8, 4, 4, 2]
    assert levels_of(pop(store)) == [1, 0]


def test_without_a_backlog_every_message_is_handed_out_at_once(store):
    create_priority_topic(store)
    pop(store)  # the group starts
    put_levels(store, [0])
    assert levels_of(pop(store)) == [0]
    put_levels(store, [0, 3])
    assert levels_of(pop(store)) == [3, 0]


def test_redeliveries_wait_behind_the_fresh_backlog(store, clock):
    create_priority_topic(store)
    put_levels(store, [9])
    first = pop(store)
    assert levels_of(first) == [9]
    clock.advance_ms(INVISIBLE_MS + 1)  # not acked: redelivered through the retry topic
    revive(store)
    put_levels(store, [2, 0])
    result = pop(store)
    assert levels_of(result) == [2, 0, 9]  # the retry copy keeps its priority, and comes last
    assert [m.source_topic for m in result.messages] == [TOPIC, TOPIC, RETRY]
    assert result.messages[2].delivery_attempt == 2


def test_priority_factor_zero_pops_in_rotation(store):
    create_priority_topic(store)
    store.groups.create_or_update(SubscriptionGroupConfig(GROUP, attributes={PRIORITY_FACTOR_ATTRIBUTE: "0"}))
    put_levels(store, list(range(LEVELS)) * 2)
    pop(store, max_count=1)  # starts the group at queue 0
    firsts = [levels_of(pop(store, max_count=1))[0] for _ in range(LEVELS - 1)]
    assert firsts != sorted(firsts, reverse=True)  # not from the top down
    assert len(set(firsts)) == LEVELS - 1  # a different queue each pop: the rotation


def low_first_pops(store, group: str, factor: str | None) -> int:
    """Of 100 single-message pops by ``group`` of the backlog, how many returned a level 0."""
    attributes = {} if factor is None else {PRIORITY_FACTOR_ATTRIBUTE: factor}
    store.groups.create_or_update(SubscriptionGroupConfig(group, attributes=attributes))
    lows = 0
    for _ in range(100):
        result = pop(store, group=group, max_count=1)
        lows += levels_of(result) == [0]
        ack_all(store, result, group=group)
    return lows


def test_priority_factor_sets_the_share_of_pops_in_priority_order(store):
    create_priority_topic(store)
    put_levels(store, [9] * 100 + [0] * 100)
    by_default, half, never = (low_first_pops(store, f"G{i}", f) for i, f in enumerate((None, "50", "0")))
    # in priority order a 0 never comes before the 9s; a pop in rotation that starts at queue 0
    # or at the retry queue (2 of 11 starts) takes a 0
    assert by_default == 0
    assert 5 <= half <= 15
    assert 2 * half - 4 <= never <= 2 * half + 4


def test_fifo_pops_and_other_topics_keep_the_rotation(store):
    create_priority_topic(store)
    put_levels(store, [0, 9])
    assert levels_of(pop(store, max_count=1, fifo=True)) == [0]  # FIFO: queue order, no priority
    mixed = "TopicMixed"
    create_priority_topic(store, mixed, message_type="MIXED")
    put_levels(store, [0, 9], topic=mixed)
    assert levels_of(pop(store, topic=mixed, max_count=1)) == [0]
