"""The timer wheel on a manual clock: ordering, exact times, same-millisecond bursts, far future
(roll), recall, overdue timers, memory budget, store failures."""

from __future__ import annotations

import random

from services.domain.names import TIMER_TOPIC
from services.domain.statuses import PutStatus
from tests.support.scheduler_timers import START_MS, delivered, lateness_ms, park, recall, run_for

GATE_MS = 1 + 50 + 20 + 10  # recall guard + dispatch margin + a poll step: the first ms of a slot wait this long


def test_each_timer_is_delivered_at_its_time_never_early(make_service, store_client, clock):
    service = make_service()
    rng = random.Random(1)
    due = {f"K{i}": START_MS + 500 + rng.randrange(10_000) for i in range(300)}
    for key, deliver_ms in due.items():
        park(store_client, "T", deliver_ms, key, queue_id=rng.randrange(4))
    run_for(service, clock, 12_000, step_ms=3)
    records = delivered(store_client, "T")
    assert sorted(r.properties["UNIQ_KEY"] for r in records) == sorted(due)
    for record in records:
        late = lateness_ms(record)
        slot_offset = (int(record.properties["TIMER_DELIVER_MS"]) - 1) % 1000
        assert 0 <= late <= (GATE_MS if slot_offset < GATE_MS else 0) + 3 + 10, record.properties
    # each queue in order of delivery time (equal times: order of arrival)
    for queue_id in range(4):
        times = [int(r.properties["TIMER_DELIVER_MS"]) for r in store_client.messages("T", queue_id)]
        assert times == sorted(times)
    stats = service.timer.stats()
    assert (stats.enqueued, stats.delivered, stats.pending, stats.duplicates, stats.dropped) == (300, 300, 0, 0, 0)


def test_delivered_message_keeps_what_rocketmq_keeps(make_service, store_client, clock):
    service = make_service()
    parked = park(store_client, "Orders", START_MS + 1_234, "ID1", queue_id=3, body=b"payload", color="red")
    run_for(service, clock, 2_000)
    [record] = delivered(store_client, "Orders")
    assert (record.topic, record.queue_id, record.body, record.flag) == ("Orders", 3, b"payload", 7)
    assert (record.born_timestamp_ms, record.born_host) == (parked.born_timestamp_ms, parked.born_host)
    props = record.properties
    # the timer's properties stay (REAL_TOPIC / REAL_QID too, as on a Java broker); enqueue and dequeue times added
    assert props["REAL_TOPIC"] == "Orders" and props["REAL_QID"] == "3" and props["color"] == "red"
    assert props["TIMER_OUT_MS"] == str(START_MS + 1_000) and props["TIMER_DELIVER_MS"] == str(START_MS + 1_234)
    assert int(props["TIMER_ENQUEUE_MS"]) == START_MS and int(props["TIMER_DEQUEUE_MS"]) >= START_MS + 1_234


def test_many_timers_in_the_same_millisecond(make_service, store_client, clock):
    service = make_service(timer_delivery_batch_messages=100)
    deliver_ms = START_MS + 2_500
    for i in range(3_000):
        park(store_client, "Burst", deliver_ms, f"B{i}")
    run_for(service, clock, 2_400, step_ms=50)
    assert delivered(store_client, "Burst") == []
    run_for(service, clock, 200, step_ms=1)
    records = delivered(store_client, "Burst")
    assert len(records) == 3_000 and all(r.store_timestamp_ms == deliver_ms for r in records)
    assert [r.properties["UNIQ_KEY"] for r in records] == [f"B{i}" for i in range(3_000)]  # arrival order


def test_timers_on_a_tick_and_just_after_it(make_service, store_client, clock):
    service = make_service()
    # D on a tick is in the slot before it (TIMER_OUT_MS = D - 1000); D + 1 is in the next slot
    park(store_client, "Tick", START_MS + 3_000, "on-tick")
    park(store_client, "Tick", START_MS + 3_001, "after-tick")
    park(store_client, "Tick", START_MS + 2_999, "before-tick")
    run_for(service, clock, 4_000, step_ms=1)
    late = {r.properties["UNIQ_KEY"]: lateness_ms(r) for r in delivered(store_client, "Tick")}
    assert late["before-tick"] == 0 and 0 <= late["on-tick"] <= 10  # one delivery pass per 10 ms
    assert 0 <= late["after-tick"] <= GATE_MS  # first ms of a slot: waits for the recall gate


def test_far_future_timer_rolls_and_is_delivered_on_time(make_service, store_client, clock):
    # Roll window 6 h: a 10-day timer rolls ~40 times. The wheel's bucket counts (a full scan,
    # test_timing_metrics.py) are taken once a day of this clock, not every 5 s.
    service = make_service(timer_snapshot_interval_ms=86_400_000)
    deliver_ms = START_MS + 10 * 86_400_000 + 4_321
    park(store_client, "Later", deliver_ms, "L1")
    park(store_client, "Later", START_MS + 5_000, "N1")
    run_for(service, clock, 6_000, step_ms=20)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "Later")] == ["N1"]
    while clock.now_ms() < deliver_ms - 10_000:
        run_for(service, clock, min(3_600_000, deliver_ms - 10_000 - clock.now_ms()), step_ms=600_000)
    run_for(service, clock, 9_900, step_ms=100)  # to 100 ms before its time: not yet delivered
    assert delivered(store_client, "Later")[1:] == []
    run_for(service, clock, 200, step_ms=1)  # a millisecond at a time across its time
    run_for(service, clock, 9_900, step_ms=100)  # and 10 s more: delivered once
    [_, record] = delivered(store_client, "Later")
    assert record.store_timestamp_ms == deliver_ms and record.properties["UNIQ_KEY"] == "L1"
    rolls = service.timer.stats().rolled
    assert rolls >= 30 and int(record.properties["TIMER_ROLL_TIMES"]) == rolls
    assert len(store_client.messages(TIMER_TOPIC)) == 2 + rolls and service.timer.stats().pending == 0


def test_thirty_days_ahead_is_kept_farther_than_the_limit_is_dropped(make_service, store_client, clock):
    service = make_service(timer_max_delay_ms=40 * 86_400_000)
    park(store_client, "Month", START_MS + 30 * 86_400_000, "M30")
    park(store_client, "Month", START_MS + 39 * 86_400_000, "M39")
    park(store_client, "Month", START_MS + 41 * 86_400_000, "M41")
    run_for(service, clock, 7 * 3_600_000, step_ms=3_600_000)  # past the first roll slot (6 h window)
    stats = service.timer.stats()
    assert (stats.enqueued, stats.dropped, stats.rolled) == (2 + 2, 1, 2)  # each roll is enqueued again
    rolled = store_client.messages(TIMER_TOPIC)[3:]
    assert [r.properties["TIMER_ROLL_TIMES"] for r in rolled] == ["1", "1"]
    assert [r.properties["TIMER_DELIVER_MS"] for r in rolled] == [
        str(START_MS + 30 * 86_400_000),
        str(START_MS + 39 * 86_400_000),
    ]


def test_recalled_timer_is_never_delivered(make_service, store_client, clock):
    service = make_service()
    for key in ("keep-1", "gone", "keep-2"):
        park(store_client, "R", START_MS + 5_500, key)
    park(store_client, "R", START_MS + 9_000, "gone-later")
    run_for(service, clock, 1_000)
    recall(store_client, "R", START_MS + 5_500, "gone")
    run_for(service, clock, 3_950)  # until 50 ms before the slot (4.x s) starts: already loaded
    recall(store_client, "R", START_MS + 9_000, "gone-later")
    clock.set_ms(START_MS + 7_950)  # the later one's slot is loaded, then recalled just in time
    run_for(service, clock, 60)
    recall(store_client, "R", START_MS + 9_000, "gone-later")
    run_for(service, clock, 4_000)
    assert sorted(r.properties["UNIQ_KEY"] for r in delivered(store_client, "R")) == ["keep-1", "keep-2"]
    stats = service.timer.stats()
    assert stats.recalled == 2 and stats.recall_markers == 3 and stats.pending == 0


def test_a_timer_enqueued_after_its_time_is_delivered_at_once(make_service, store_client, clock):
    service = make_service()
    run_for(service, clock, 3_000)
    store_client.down = True
    park(store_client, "Late", START_MS + 3_500, "L")  # parked while the scheduler cannot read
    clock.advance_ms(4_000)
    store_client.down = False
    run_for(service, clock, 200, step_ms=10)
    [record] = delivered(store_client, "Late")
    assert 0 < lateness_ms(record) <= 3_600 and record.store_timestamp_ms <= START_MS + 7_000 + 200


def test_a_slot_over_the_memory_budget_is_delivered_in_parts(make_service, store_client, clock):
    service = make_service(timer_active_units_max=100)
    for i in range(450):
        park(store_client, "Big", START_MS + 1_500 + i % 3, f"K{i}")
    park(store_client, "Big", START_MS + 1_600, "recalled")
    recall(store_client, "Big", START_MS + 1_600, "recalled")
    run_for(service, clock, 2_000, step_ms=10)
    keys = [r.properties["UNIQ_KEY"] for r in delivered(store_client, "Big")]
    assert sorted(keys) == sorted(f"K{i}" for i in range(450)) and all(
        lateness_ms(r) >= 0 for r in delivered(store_client, "Big")
    )
    assert service.timer.stats().active_units == 0


def test_store_outage_and_refusals(make_service, store_client, clock):
    service = make_service()
    park(store_client, "Out", START_MS + 1_500, "A")
    park(store_client, "Out", START_MS + 1_600, "B")
    park(store_client, "Nope", START_MS + 1_700, "C")
    run_for(service, clock, 1_400)
    store_client.down = True
    clock.advance_ms(500)
    try:
        service.timer.run_once()
    except Exception as exc:  # noqa: BLE001 - the loop catches it in production
        assert type(exc).__name__ == "StoreUnavailableError"
    store_client.down = False
    store_client.outcome = lambda m: PutStatus.TOPIC_NOT_FOUND if m.topic == "Nope" else PutStatus.PUT_OK
    run_for(service, clock, 1_000)
    assert sorted(r.properties["UNIQ_KEY"] for r in delivered(store_client, "Out")) == ["A", "B"]
    stats = service.timer.stats()
    assert (stats.delivered, stats.dropped, stats.pending) == (2, 1, 0)


def test_a_batch_the_store_refuses_for_one_message_delivers_the_others(make_service, store_client, clock):
    """The store refuses a whole put for one bad message (all or nothing): here a REAL_QID the
    real topic does not have. The scheduler puts that batch again message by message, so the
    good messages are delivered and only the bad one is dropped."""
    service = make_service()
    park(store_client, "Out", START_MS + 1_500, "A")
    park(store_client, "Out", START_MS + 1_500, "bad-queue", queue_id=99)  # "Out" is created with 8 queues
    park(store_client, "Out", START_MS + 1_500, "B")
    run_for(service, clock, 1_400)
    assert store_client.put_calls == 0
    run_for(service, clock, 200)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "Out")] == ["A", "B"]
    assert store_client.put_calls == 1 + 3  # the batch, refused as a whole; then each message alone
    stats = service.timer.stats()
    assert (stats.delivered, stats.dropped, stats.pending, stats.duplicates) == (2, 1, 0, 0)


def test_retryable_refusal_retries_later(make_service, store_client, clock):
    service = make_service()
    park(store_client, "Busy", START_MS + 1_500, "A")
    store_client.outcome = lambda m: PutStatus.OS_PAGE_CACHE_BUSY
    run_for(service, clock, 2_000)
    assert delivered(store_client, "Busy") == []
    store_client.outcome = None
    run_for(service, clock, 1_100)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "Busy")] == ["A"]


def test_a_put_whose_reply_is_lost_is_retried_and_counted(make_service, store_client, clock):
    from services.store.client.errors import StoreUnavailableError

    service = make_service()
    for i in range(5):
        park(store_client, "Lost", START_MS + 1_500, f"L{i}")

    def lose_reply(messages):
        store_client.after_put = None
        raise StoreUnavailableError("deadline exceeded")  # appended, but the scheduler never heard

    store_client.after_put = lose_reply
    errors = 0
    end_ms = START_MS + 3_000
    while clock.now_ms() < end_ms:
        try:
            service.timer.run_once()
        except StoreUnavailableError:
            errors += 1
        clock.advance_ms(5)
    records = delivered(store_client, "Lost")
    assert errors == 1 and len(records) == 10 and all(lateness_ms(r) >= 0 for r in records)
    assert service.timer.stats().duplicates == 5 and service.timer.stats().delivered == 5


def test_a_recall_at_the_last_allowed_millisecond_still_wins(make_service, store_client, clock):
    """The broker accepts a recall until TIMER_OUT_MS (the slot's start); the message may be due
    1 ms later. The recall gate holds the slot's deliveries until every marker stored before the
    slot began (+ the guard for the put's latency) is enqueued."""
    service = make_service()
    park(store_client, "Edge", START_MS + 5_001, "first-ms")
    park(store_client, "Edge", START_MS + 5_001, "kept")
    run_for(service, clock, 5_000, step_ms=1)  # now = TIMER_OUT_MS: the slot is loaded
    run_for(service, clock, 40, step_ms=1)  # the recall's put takes 40 ms to reach the store
    recall(store_client, "Edge", START_MS + 5_001, "first-ms")
    run_for(service, clock, 1_000, step_ms=1)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "Edge")] == ["kept"]
    assert service.timer.stats().recalled == 1
