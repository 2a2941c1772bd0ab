"""Crash and recovery of the timer files: re-open mid-way (as after kill -9), torn TimerLog
tails, a lost checkpoint, a wheel that reached the disk before the log. Nothing is lost,
nothing is early, duplicates happen only for a put in flight and are counted."""

from __future__ import annotations

import collections

import pytest

from tests.support.scheduler_timers import START_MS, delivered, lateness_ms, park, run_for


class Crash(Exception):
    """The process dies here (raised from inside a store call)."""


def keys(store_client, topic: str) -> collections.Counter:
    return collections.Counter(r.properties["UNIQ_KEY"] for r in delivered(store_client, topic))


def park_many(store_client, count: int, first_ms: int, spread_ms: int, topic: str = "T") -> dict[str, int]:
    due = {f"K{i:03d}": first_ms + (i * 7919) % spread_ms for i in range(count)}
    for key, deliver_ms in due.items():
        park(store_client, topic, deliver_ms, key)
    return due


def test_clean_restart_continues_where_it_stopped(make_service, store_client, clock):
    due = park_many(store_client, 200, START_MS + 1_000, 6_000)
    service = make_service()
    run_for(service, clock, 3_500)
    first = set(keys(store_client, "T"))
    assert 0 < len(first) < 200
    service.stop()
    service = make_service()
    run_for(service, clock, 5_000)
    assert keys(store_client, "T") == collections.Counter(due.keys())
    assert all(lateness_ms(r) >= 0 for r in delivered(store_client, "T"))
    assert service.timer.stats().enqueued == 0 and service.timer.stats().duplicates == 0


@pytest.mark.parametrize("crash_after_ms", [0, 1_200, 2_600, 4_100])
def test_halt_anywhere_loses_nothing_and_delivers_nothing_twice(make_service, store_client, clock, crash_after_ms):
    due = park_many(store_client, 150, START_MS + 1_000, 5_000)
    service = make_service()
    run_for(service, clock, crash_after_ms, step_ms=7)
    service.halt()  # no flush, no checkpoint
    clock.advance_ms(300)  # down for a while
    service = make_service()
    run_for(service, clock, 7_000, step_ms=7)
    assert keys(store_client, "T") == collections.Counter(due.keys())
    assert all(lateness_ms(r) >= 0 for r in delivered(store_client, "T"))


def test_crash_with_a_put_in_flight_redelivers_that_batch_and_counts_it(make_service, store_client, clock):
    due = park_many(store_client, 60, START_MS + 1_500, 200)
    service = make_service(timer_delivery_batch_messages=16)

    def crash(messages):
        if messages[0].topic == "T":
            store_client.after_put = None
            raise Crash()  # the store appended the batch; the scheduler died before marking it

    store_client.after_put = crash
    with pytest.raises(Crash):
        run_for(service, clock, 3_000)
    service.halt()
    service = make_service(timer_delivery_batch_messages=16)
    run_for(service, clock, 3_000)
    counts = keys(store_client, "T")
    assert set(counts) == set(due) and all(lateness_ms(r) >= 0 for r in delivered(store_client, "T"))
    duplicates = sum(n - 1 for n in counts.values())
    assert 0 < duplicates <= 16 and service.timer.stats().duplicates == duplicates


def test_torn_timerlog_tail_is_truncated_and_reenqueued(make_service, store_client, clock, tmp_path):
    due = park_many(store_client, 40, START_MS + 2_000, 1_000)
    service = make_service()
    service.timer.run_once()  # enqueue all 40, deliver nothing yet
    assert service.timer.stats().enqueued == 40
    service.halt()
    segment = sorted((tmp_path / "scheduler" / "timerlog").iterdir())[0]
    data = bytearray(segment.read_bytes())
    data[52 * 39 + 30] ^= 0xFF  # the last unit (offset_py) no longer matches its crc
    segment.write_bytes(bytes(data))
    service = make_service()
    run_for(service, clock, 4_000)
    assert keys(store_client, "T") == collections.Counter(due.keys())
    assert service.timer.stats().enqueued == 1  # only the torn unit's message was read again


def test_lost_checkpoint_recovers_from_the_log_alone(make_service, store_client, clock, tmp_path):
    due = park_many(store_client, 100, START_MS + 1_000, 4_000)
    service = make_service()
    run_for(service, clock, 2_500)
    service.stop()
    (tmp_path / "scheduler" / "config" / "timercheck").unlink()
    service = make_service()
    run_for(service, clock, 4_000)
    assert keys(store_client, "T") == collections.Counter(due.keys())
    assert service.timer.stats().enqueued == 0


def test_wheel_written_back_before_the_log_power_loss(make_service, store_client, clock, tmp_path, caplog):
    """Power loss: the checkpointed (flushed) prefix of the TimerLog survives, its unflushed
    tail is gone, but the wheel's pages were written back and point into that lost tail."""
    first = park_many(store_client, 30, START_MS + 5_000, 1_000, topic="A")
    service = make_service()
    service.timer.run_once()
    service.timer.flush()  # units of A are durable and checkpointed
    flushed = service.timer.timer_log.flushed_pos
    second = park_many(store_client, 30, START_MS + 5_000, 1_000, topic="B")
    service.timer.run_once()  # units of B: page cache only
    service.halt()
    segments = sorted((tmp_path / "scheduler" / "timerlog").iterdir())
    for segment in segments:  # drop everything after the flushed position
        start = int(segment.name)
        data = bytearray(segment.read_bytes())
        cut = max(0, flushed - start)
        data[cut:] = bytes(len(data) - cut)
        segment.write_bytes(bytes(data))
    service = make_service()
    assert "wheel slots point past the TimerLog end" in caplog.text
    run_for(service, clock, 7_000)
    assert keys(store_client, "A") == collections.Counter(first.keys())
    assert keys(store_client, "B") == collections.Counter(second.keys())
    assert service.timer.stats().enqueued == 30  # B read again from the store
