"""RocketMQ 5's timer metrics on a manual clock: ``rocketmq_timing_messages{topic}`` through enqueue,
delivery, recall, roll, clean and crash restarts and a lost ``timermetrics`` file;
``rocketmq_timer_enqueue_latency``; ``rocketmq_timer_message_snapshot{timer_bound_s}``."""

from __future__ import annotations

import collections
import json

import pytest

from services.domain.format.timercheck_format import decode_timer_check
from services.domain.format.timermetrics_format import (
    TimerMetricsDocument,
    TimingCount,
    decode_timer_metrics,
    encode_timer_metrics,
)
from services.scheduler.metrics import SchedulerMetrics
from tests.support.scheduler_timers import START_MS, delivered, park, recall, run_for


def timing(service) -> dict[str, int]:
    return dict(service.timer.stats().timing)


def waiting(store_client, parked: dict[str, list[str]]) -> dict[str, int]:
    """Ground truth: per topic, parked timers not delivered yet (a duplicate counts once)."""
    return {
        topic: len(keys) - len({r.properties["UNIQ_KEY"] for r in delivered(store_client, topic)})
        for topic, keys in parked.items()
    }


def test_rocketmq_format_of_the_timermetrics_file():
    document = TimerMetricsDocument(
        counter=3, timestamp_ms=START_MS, timing_count={"TopicB": TimingCount(0, 5), "TopicA": TimingCount(2, 7)}
    )
    text = encode_timer_metrics(document)
    assert text == (
        '{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},'
        '"timingCount":{"TopicA":{"count":2,"timeStamp":7},"TopicB":{"count":0,"timeStamp":5}}}'
    )
    assert decode_timer_metrics(text) == document
    with pytest.raises(ValueError):
        decode_timer_metrics('{"timingCount":{"T":{"count":"2"}}}')


def test_counts_follow_enqueue_and_delivery_and_are_exported(make_service, store_client, clock):
    service = make_service()
    metrics = SchedulerMetrics(service.stats, clock)
    for i in range(3):
        park(store_client, "A", START_MS + 2_000 + i, f"A{i}")
    for i in range(2):
        park(store_client, "B", START_MS + 5_000, f"B{i}")
    run_for(service, clock, 500)
    assert timing(service) == {"A": 3, "B": 2}
    assert metrics.registry.get_sample_value("rocketmq_timing_messages", {"topic": "A"}) == 3
    run_for(service, clock, 2_000)
    assert len(delivered(store_client, "A")) == 3 and timing(service) == {"A": 0, "B": 2}
    run_for(service, clock, 3_000)
    assert len(delivered(store_client, "B")) == 2 and timing(service) == {"A": 0, "B": 0}


def test_a_recalled_timer_leaves_the_count_when_the_marker_wins(make_service, store_client, clock):
    service = make_service()
    park(store_client, "R", START_MS + 3_000, "KEEP")
    park(store_client, "R", START_MS + 3_000, "GONE")
    recall(store_client, "R", START_MS + 3_000, "GONE")
    recall(store_client, "R", START_MS + 3_000, "NEVER-SENT")  # RocketMQ would count this one -1
    run_for(service, clock, 500)
    stats = service.timer.stats()
    assert stats.recall_markers == 2 and timing(service) == {"R": 2}  # markers are not messages
    run_for(service, clock, 3_000)
    assert [r.properties["UNIQ_KEY"] for r in delivered(store_client, "R")] == ["KEEP"]
    assert service.timer.stats().recalled == 1 and timing(service) == {"R": 0}


def test_a_rolled_timer_is_counted_once_while_it_rolls(make_service, store_client, clock):
    service = make_service()  # roll window 6 h
    deliver_ms = START_MS + 20 * 3_600_000
    park(store_client, "Far", deliver_ms, "F")
    run_for(service, clock, 1_000)
    assert timing(service) == {"Far": 1}
    while clock.now_ms() < deliver_ms - 10_000:
        run_for(service, clock, min(3_600_000, deliver_ms - 10_000 - clock.now_ms()), step_ms=600_000)
        assert timing(service) == {"Far": 1}
    assert service.timer.stats().rolled >= 2
    run_for(service, clock, 11_000, step_ms=10)
    assert len(delivered(store_client, "Far")) == 1 and timing(service) == {"Far": 0}


def test_clean_restart_keeps_the_counts_in_a_rocketmq_timermetrics_file(make_service, store_client, clock, tmp_path):
    parked = {"A": [f"A{i}" for i in range(40)], "B": [f"B{i}" for i in range(25)]}
    for topic, keys in parked.items():
        for i, key in enumerate(keys):
            park(store_client, topic, START_MS + 1_000 + (i * 997) % 4_000, key)
    service = make_service()
    run_for(service, clock, 2_500)
    assert timing(service) == waiting(store_client, parked) and 0 < sum(timing(service).values()) < 65
    service.stop()
    config = tmp_path / "scheduler" / "config"
    raw = json.loads((config / "timermetrics").read_text())
    assert list(raw) == ["dataVersion", "timingCount"] and list(raw["timingCount"]["A"]) == ["count", "timeStamp"]
    check = decode_timer_check((config / "timercheck").read_bytes())
    assert raw["dataVersion"]["counter"] <= check.counter
    service = make_service()
    run_for(service, clock, 0)
    assert timing(service) == waiting(store_client, parked)
    run_for(service, clock, 4_000)
    assert timing(service) == {"A": 0, "B": 0} == waiting(store_client, parked)


@pytest.mark.parametrize("crash_after_ms", [0, 1_240, 2_610, 3_990])
def test_counts_are_exact_after_a_crash_anywhere(make_service, store_client, clock, crash_after_ms):
    parked = {"A": [f"A{i:03d}" for i in range(120)], "B": [f"B{i:03d}" for i in range(60)]}
    for topic, keys in parked.items():
        for i, key in enumerate(keys):
            park(store_client, topic, START_MS + 1_000 + (i * 7919) % 5_000, key)
    park(store_client, "R", START_MS + 4_500, "GONE")
    recall(store_client, "R", START_MS + 4_500, "GONE")
    service = make_service()
    run_for(service, clock, crash_after_ms, step_ms=7)
    half = [f"late{i}" for i in range(10)]  # enqueued after the last checkpoint, then the crash
    for key in half:
        park(store_client, "A", START_MS + 6_500, key)
    parked["A"] += half
    while service.timer.run_once():
        pass
    service.halt()  # no flush, no checkpoint
    clock.advance_ms(300)
    service = make_service()
    run_for(service, clock, 0)
    assert {t: n for t, n in timing(service).items() if t != "R"} == waiting(store_client, parked)
    run_for(service, clock, 7_000, step_ms=7)
    assert timing(service) == {"A": 0, "B": 0, "R": 0} == waiting(store_client, parked) | {"R": 0}
    assert delivered(store_client, "R") == []


@pytest.mark.parametrize("damage", ["deleted", "written by RocketMQ"])
def test_counts_are_rebuilt_from_the_timer_log_without_a_usable_file(
    make_service, store_client, clock, tmp_path, damage
):
    parked = {"A": [f"A{i}" for i in range(30)], "B": [f"B{i}" for i in range(12)]}
    for topic, keys in parked.items():
        for i, key in enumerate(keys):
            park(store_client, topic, START_MS + 1_000 + (i * 613) % 3_000, key)
    service = make_service()
    run_for(service, clock, 2_200)
    service.stop()
    config = tmp_path / "scheduler" / "config"
    for name in ("timermetrics", "timermetrics.bak"):
        (config / name).unlink(missing_ok=True)
    if damage == "written by RocketMQ":  # its dataVersion counts updates, not our checkpoints
        stale = TimerMetricsDocument(counter=10**9, timestamp_ms=START_MS, timing_count={"A": TimingCount(99, 1)})
        (config / "timermetrics").write_text(encode_timer_metrics(stale))
    service = make_service()
    run_for(service, clock, 0)
    assert timing(service) == waiting(store_client, parked) and sum(timing(service).values()) > 0
    run_for(service, clock, 3_000)
    assert timing(service) == {"A": 0, "B": 0}


def test_enqueue_latency_is_how_far_behind_the_enqueue_is(make_service, store_client, clock):
    service = make_service(timer_enqueue_batch_messages=2)
    metrics = SchedulerMetrics(service.stats, clock)
    for i in range(5):
        park(store_client, "L", START_MS + 60_000, f"L{i}")
    clock.advance_ms(1_500)
    service.timer.enqueue.run_once()  # two of five
    assert metrics.registry.get_sample_value("rocketmq_timer_enqueue_latency") == 1_500
    clock.advance_ms(500)
    assert metrics.registry.get_sample_value("rocketmq_timer_enqueue_latency") == 2_000
    run_for(service, clock, 0)
    assert service.timer.stats().enqueue_lag == 0
    assert metrics.registry.get_sample_value("rocketmq_timer_enqueue_latency") == 0


def test_snapshot_counts_units_per_bucket_taken_on_the_timer_thread(make_service, store_client, clock):
    service = make_service(timer_snapshot_interval_ms=5_000)
    metrics = SchedulerMetrics(service.stats, clock)
    for key, ahead_ms in (("s3", 3_000), ("s30", 30_000), ("m10", 600_000), ("h2", 7_200_000), ("h2b", 7_200_500)):
        park(store_client, "S", START_MS + ahead_ms, key)
    run_for(service, clock, 0)
    assert service.timer.stats().distribution == (
        (5, 1),
        (60, 1),
        (300, 0),
        (900, 1),
        (3600, 0),
        (14400, 2),
        (28800, 0),
        (86400, 0),
    )
    assert metrics.registry.get_sample_value("rocketmq_timer_message_snapshot", {"timer_bound_s": "14400"}) == 2
    run_for(service, clock, 6_000)  # s3 delivered; the next snapshot starts 6 s later
    assert collections.OrderedDict(service.timer.stats().distribution)[5] == 0
    assert collections.OrderedDict(service.timer.stats().distribution)[60] == 1


def test_a_file_written_for_a_checkpoint_that_never_was_gives_way_to_its_backup(
    make_service, store_client, clock, tmp_path
):
    parked = {"A": [f"A{i}" for i in range(20)]}
    for i, key in enumerate(parked["A"]):
        park(store_client, "A", START_MS + 1_000 + i * 100, key)
    service = make_service()
    run_for(service, clock, 1_500)
    service.stop()
    config = tmp_path / "scheduler" / "config"
    check = decode_timer_check((config / "timercheck").read_bytes())
    (config / "timermetrics").replace(config / "timermetrics.bak")  # crash after the metrics, before timercheck
    ahead = TimerMetricsDocument(
        counter=check.counter + 1, timestamp_ms=START_MS, timing_count={"A": TimingCount(3, 1)}
    )
    (config / "timermetrics").write_text(encode_timer_metrics(ahead))
    service = make_service()
    run_for(service, clock, 0)
    assert timing(service) == waiting(store_client, parked) and timing(service)["A"] > 3
