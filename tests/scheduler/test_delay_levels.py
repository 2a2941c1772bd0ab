"""Delay levels (SCHEDULE_TOPIC_XXXX, RocketMQ's ScheduleMessageService) on a manual clock."""

from __future__ import annotations

import pytest

from services.domain.names import SCHEDULE_TOPIC
from services.scheduler.config import SchedulerConfig
from services.store.client.model import MessageToPut
from tests.support.scheduler_timers import START_MS


class Crash(Exception):
    pass


def park_level(store_client, level: int, topic: str, key: str, queue_id: int = 0, real_topic: str | None = None):
    """A message the broker parked at a delay level: SCHEDULE_TOPIC_XXXX queue level - 1."""
    properties = {
        "DELAY": str(level),
        "REAL_TOPIC": real_topic or topic,
        "REAL_QID": str(queue_id),
        "UNIQ_KEY": key,
        "TAGS": "TagB",
    }
    return store_client.append(
        MessageToPut(
            SCHEDULE_TOPIC,
            level - 1,
            b"delayed " + key.encode(),
            properties,
            flag=3,
            born_timestamp_ms=START_MS - 5,
            born_host="10.0.0.2:99",
            reconsume_times=2,
        )
    )


def run_levels(service, clock, duration_ms: int, step_ms: int = 1) -> None:
    end_ms = clock.now_ms() + duration_ms
    while clock.now_ms() < end_ms:
        service.delay.run_once()
        clock.advance_ms(step_ms)
    service.delay.run_once()


def test_each_level_delivers_after_its_delay_with_rocketmq_properties(make_service, store_client, clock):
    service = make_service()
    for level, key in ((1, "one"), (2, "five"), (3, "ten"), (1, "one-b")):
        park_level(store_client, level, "Retry", key, queue_id=level)
    run_levels(service, clock, 900, step_ms=10)
    assert store_client.messages("Retry") == []
    run_levels(service, clock, 10_200, step_ms=1)
    records = {r.properties["UNIQ_KEY"]: r for r in store_client.messages("Retry")}
    assert {key: r.store_timestamp_ms - START_MS for key, r in records.items()} == {
        "one": 1_000,
        "one-b": 1_000,
        "five": 5_000,
        "ten": 10_000,
    }
    one = records["one"]
    assert (one.topic, one.queue_id, one.body, one.flag, one.reconsume_times) == ("Retry", 1, b"delayed one", 3, 2)
    assert (one.born_timestamp_ms, one.born_host) == (START_MS - 5, "10.0.0.2:99")
    # the stored properties stay, DELAY / REAL_TOPIC / REAL_QID included, as a Java broker leaves them
    # (docs/store-files.md, section 4)
    assert one.properties == {"DELAY": "1", "REAL_TOPIC": "Retry", "REAL_QID": "1", "UNIQ_KEY": "one", "TAGS": "TagB"}
    assert store_client.delay_offsets == {1: 2, 2: 1, 3: 1}
    stats = service.delay.stats()
    assert stats.delivered == 4 and stats.offsets[:3] == (2, 1, 1) and stats.lateness.count == 4


def test_half_topic_and_broken_messages_are_discarded(make_service, store_client, clock):
    service = make_service()
    park_level(store_client, 1, "X", "half", real_topic="RMQ_SYS_TRANS_HALF_TOPIC")
    store_client.append(MessageToPut(SCHEDULE_TOPIC, 0, b"x", {"DELAY": "1", "UNIQ_KEY": "no-real-topic"}))
    park_level(store_client, 1, "Ok", "fine")
    run_levels(service, clock, 1_100, step_ms=10)
    assert [r.properties["UNIQ_KEY"] for r in store_client.messages("Ok")] == ["fine"]
    assert store_client.delay_offsets[1] == 3 and service.delay.stats().dropped == 2


def test_a_batch_the_store_refuses_for_one_message_delivers_the_others(make_service, store_client, clock):
    """A put is all or nothing: the store refuses the level's batch for the one message whose
    real topic is an illegal name. Put again message by message, the others are delivered."""
    service = make_service()
    park_level(store_client, 1, "Good", "g1")
    park_level(store_client, 1, "Good", "bad", real_topic="no such topic!")
    park_level(store_client, 1, "Good", "g2")
    run_levels(service, clock, 1_100, step_ms=10)
    assert [r.properties["UNIQ_KEY"] for r in store_client.messages("Good")] == ["g1", "g2"]
    assert store_client.put_calls == 1 + 3  # the batch, refused as a whole; then each message alone
    assert store_client.delay_offsets == {1: 3}
    stats = service.delay.stats()
    assert (stats.delivered, stats.dropped, stats.duplicates) == (2, 1, 0)


def test_a_clock_that_went_back_delivers_at_once(make_service, store_client, clock):
    service = make_service()
    clock.advance_ms(60_000)
    park_level(store_client, 2, "Back", "future")  # stored at +60 s: due at +65 s
    clock.set_ms(START_MS)  # the clock goes back a minute
    run_levels(service, clock, 20, step_ms=10)
    assert [r.properties["UNIQ_KEY"] for r in store_client.messages("Back")] == ["future"]


def test_a_crash_between_put_and_offset_update_redelivers_and_counts(make_service, store_client, clock):
    service = make_service()
    for i in range(5):
        park_level(store_client, 1, "Dup", f"d{i}")

    def crash(messages):
        store_client.after_put = None
        raise Crash()

    store_client.after_put = crash
    clock.advance_ms(1_000)
    with pytest.raises(Crash):
        service.delay.run_once()
    service.halt()
    assert store_client.delay_offsets == {} and len(store_client.messages("Dup")) == 5
    service = make_service()
    run_levels(service, clock, 10)
    assert len(store_client.messages("Dup")) == 10 and store_client.delay_offsets == {1: 5}
    assert service.delay.stats().duplicates == 5 and service.delay.stats().delivered == 5


def test_levels_are_configurable_and_capped():
    config = SchedulerConfig(root=__import__("pathlib").Path("/nonexistent"), delay_levels="1s 2m 3h 1d")
    assert config.delay_level_ms == (1_000, 120_000, 10_800_000, 86_400_000)
    with pytest.raises(ValueError):
        SchedulerConfig(root=config.root, delay_levels="1x")


def test_a_delay_above_the_last_level_uses_the_last_level(make_service, store_client, clock):
    service = make_service(delay_levels="1s 2s")
    store_client.append(
        MessageToPut(SCHEDULE_TOPIC, 1, b"x", {"DELAY": "18", "REAL_TOPIC": "Cap", "REAL_QID": "0", "UNIQ_KEY": "cap"})
    )
    run_levels(service, clock, 1_990, step_ms=10)
    assert store_client.messages("Cap") == []
    run_levels(service, clock, 20, step_ms=1)
    assert [r.store_timestamp_ms - START_MS for r in store_client.messages("Cap")] == [2_000]


def test_a_message_parked_during_the_read_is_not_delivered_early(make_service, store_client, clock):
    """run_once reads the clock, then the queue; a message parked in between (a loaded machine)
    has a store time after that clock reading. It must wait its whole delay, not count as a
    message from a clock that went back (regression: delivered ~50 ms after parking in CI)."""
    service = make_service()
    read = store_client.get_messages

    def get_messages_while_a_producer_parks(*args, **kwargs):
        if not store_client.messages("SCHEDULE_TOPIC_XXXX"):
            clock.advance_ms(50)
            park_level(store_client, 1, "Late", "parked-during-read")
        return read(*args, **kwargs)

    store_client.get_messages = get_messages_while_a_producer_parks
    parked_ms = START_MS + 50
    run_levels(service, clock, 990, step_ms=10)
    assert store_client.messages("Late") == []
    run_levels(service, clock, 100, step_ms=1)
    [delivered] = store_client.messages("Late")
    assert delivered.store_timestamp_ms == parked_ms + 1_000
