"""The file owners: TimerLog segments (blank at the end, scan, truncate, state in place),
TimerWheel slots, and TimerLog retention through the TimerStore."""

from __future__ import annotations

import pytest

from services.domain.format.timerlog_format import (
    BLANK_MAGIC,
    MAGIC_DEFAULT,
    STATE_DELIVERING,
    STATE_DONE,
    TimerUnit,
    is_blank,
)
from services.scheduler.timer_log import TimerLog
from services.scheduler.timer_wheel import TimerWheel
from tests.support.scheduler_timers import START_MS, delivered, park, run_for

SEGMENT = 52 * 100 + 16  # 100 units, then a 16-byte blank


def unit(i: int, prev_pos: int = -1) -> TimerUnit:
    return TimerUnit(prev_pos, MAGIC_DEFAULT, START_MS, 1000 + i, 10_000 + i, 200)


def test_units_roll_into_the_next_segment_after_a_blank(tmp_path):
    log = TimerLog(tmp_path / "timerlog", SEGMENT)
    log.load()
    positions = [log.append_unit(unit(i)) for i in range(250)]
    log.commit()
    assert positions[99] == 99 * 52 and positions[100] == SEGMENT and positions[200] == 2 * SEGMENT
    assert sorted(p.name for p in (tmp_path / "timerlog").iterdir()) == [
        "00000000000000000000",
        "00000000000000005216",
        "00000000000000010432",
    ]
    first = (tmp_path / "timerlog" / "00000000000000000000").read_bytes()
    assert (
        len(first) == SEGMENT
        and is_blank(first, 5200)
        and int.from_bytes(first[5212:], "big", signed=True) == BLANK_MAGIC
    )
    assert [(pos, u.offset_py) for pos, u in log.scan(0)] == [(p, 10_000 + i) for i, p in enumerate(positions)]
    assert log.scan_end == log.write_pos
    log.set_state(positions[7], STATE_DONE)
    log.flush()
    log.close()

    reopened = TimerLog(tmp_path / "timerlog", SEGMENT)
    reopened.load()
    units = list(reopened.scan(99 * 52))
    assert len(units) == 151 and units[0][1].offset_py == 10_099
    reopened.truncate(reopened.scan_end)
    assert reopened.write_pos == positions[-1] + 52
    assert reopened.read_unit(positions[7]).state == STATE_DONE
    reopened.close()


def test_truncate_zeroes_the_tail_and_drops_later_segments(tmp_path):
    log = TimerLog(tmp_path / "timerlog", SEGMENT)
    log.load()
    positions = [log.append_unit(unit(i)) for i in range(150)]
    log.commit()
    log.truncate(positions[42])
    assert log.segment_starts() == [0] and log.read_unit(positions[42]) is None
    assert [u.offset_py for _, u in log.scan(0)][-1] == 10_041
    assert log.append_unit(unit(999)) == positions[42]
    log.commit()
    assert log.read_unit(positions[42]).offset_py == 10_999
    log.close()


def test_wrong_segment_size_is_refused(tmp_path):
    log = TimerLog(tmp_path / "timerlog", SEGMENT)
    log.load()
    log.append_unit(unit(0))
    log.commit()
    log.close()
    with pytest.raises(ValueError, match="timerlog_file_size_bytes"):
        TimerLog(tmp_path / "timerlog", SEGMENT * 2).load()


def test_wheel_slots_ring_and_recovery_revision(tmp_path):
    wheel = TimerWheel(tmp_path / "timerwheel", 3_600, 1000)
    assert (tmp_path / "timerwheel").stat().st_size == 2 * 3_600 * 32
    assert wheel.get_slot(START_MS).last_pos == -1
    wheel.put_slot(START_MS, 0, 104, 3)
    assert wheel.get_slot(START_MS + 999).last_pos == 104
    assert wheel.get_slot(START_MS + 7_200_000).last_pos == -1  # same index, another time
    wheel.revise_slot(START_MS, 52, 1)  # already known: no change
    assert wheel.get_slot(START_MS)[1:4] == (0, 104, 3)
    wheel.revise_slot(START_MS, 156, 1)  # a unit the wheel missed
    assert wheel.get_slot(START_MS)[1:4] == (0, 156, 4)
    wheel.revise_slot(START_MS + 1000, 208, -1)
    assert wheel.pending_count(START_MS) == 3 and wheel.pending_count(START_MS + 1000) == -1
    wheel.close()
    with pytest.raises(ValueError, match="timer_wheel_slots"):
        TimerWheel(tmp_path / "timerwheel", 7_200, 1000)


def test_delivered_segments_are_deleted_and_the_store_restarts_without_them(
    make_service, store_client, clock, tmp_path
):
    service = make_service(timerlog_cleanup_interval_ms=1)
    for i in range(350):
        park(store_client, "Old", START_MS + 1_000 + 10 * i, f"O{i}")
    run_for(service, clock, 500)
    assert len(service.timer.timer_log.segment_starts()) == 4
    run_for(service, clock, 5_000, step_ms=20)
    assert len(delivered(store_client, "Old")) == 350
    assert service.timer.timer_log.segment_starts() == [3 * SEGMENT]  # only the last one stays
    park(store_client, "New", START_MS + 7_000, "N")
    service.halt()
    service = make_service()
    run_for(service, clock, 2_000)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "New")] == ["N"]
    assert len(delivered(store_client, "Old")) == 350
    assert service.timer.timer_log.read_unit(3 * SEGMENT).state == STATE_DONE
    assert STATE_DELIVERING != STATE_DONE
