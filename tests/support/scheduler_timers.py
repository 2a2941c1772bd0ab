"""Scheduler timers for tests, on a real store (``StoreDouble``, tests/support/store_double.py) and a
ManualClock from ``START_MS``: ``small_config`` (a one-day wheel, small TimerLog segments),
``park`` and ``recall`` (a delay message and a recall marker exactly as the broker puts them:
services/broker/producer.py, recall.py), ``run_for`` (the timer loop while manual time passes),
``delivered`` and ``lateness_ms``."""

from __future__ import annotations

from pathlib import Path

from services.broker.config import BrokerConfig
from services.broker.producer import recall_handle
from services.broker.recall import decode_handle, marker_message
from services.domain.contracts.delay import timer_out_ms
from services.domain.names import TIMER_TOPIC
from services.runtime.clock import ManualClock
from services.scheduler.config import SchedulerConfig
from services.scheduler.service import SchedulerService
from services.store.client.model import MessageToPut, StoredMessage
from tests.support.store_double import StoreDouble

START_MS = 1_700_000_000_000
PRECISION_MS = 1000


def small_config(root: Path, **overrides) -> SchedulerConfig:
    """Small files: a one-day wheel (6 h roll window), 100-unit TimerLog segments."""
    values = dict(
        root=root,
        timer_wheel_slots=86_400,
        timer_roll_window_slots=21_600,
        timerlog_file_size_bytes=52 * 100 + 16,
        timer_flush_interval_ms=1_000,
    )
    values.update(overrides)
    return SchedulerConfig(**values)


def park(
    store: StoreDouble,
    topic: str,
    deliver_ms: int,
    uniq_key: str,
    queue_id: int = 0,
    body: bytes = b"body",
    **properties: str,
) -> StoredMessage:
    """A delay message as the broker parks it: rmq_sys_wheel_timer/0 with TIMER_* properties."""
    props = {
        "TIMER_DELIVER_MS": str(deliver_ms),
        "TIMER_OUT_MS": str(timer_out_ms(deliver_ms, PRECISION_MS)),
        "REAL_TOPIC": topic,
        "REAL_QID": str(queue_id),
        "UNIQ_KEY": uniq_key,
        "TAGS": "TagA",
        **properties,
    }
    return store.append(
        MessageToPut(
            TIMER_TOPIC,
            0,
            body,
            props,
            sys_flag=0,
            flag=7,
            born_timestamp_ms=START_MS,
            born_host="10.0.0.1:1234",
            reconsume_times=0,
        )
    )


def recall(store: StoreDouble, topic: str, deliver_ms: int, uniq_key: str) -> StoredMessage:
    """The recall marker the broker puts for the handle of a message due at ``deliver_ms``."""
    config = BrokerConfig()
    handle = decode_handle(recall_handle(topic, config.broker_name, timer_out_ms(deliver_ms, PRECISION_MS), uniq_key))
    timestamp_ms = int(handle.timestamp_text)
    marker = marker_message(
        config, handle, timestamp_ms, timer_out_ms(timestamp_ms, PRECISION_MS), "", store.clock.now_ms()
    )
    return store.append(
        MessageToPut(
            marker.topic, marker.queue_id, marker.body, marker.properties, born_timestamp_ms=marker.born_timestamp_ms
        )
    )


def run_for(service: SchedulerService, clock: ManualClock, duration_ms: int, step_ms: int = 5) -> None:
    """Run the timer loop while ``duration_ms`` of manual time passes, ``step_ms`` at a time."""
    end_ms = clock.now_ms() + duration_ms
    while clock.now_ms() < end_ms:
        while service.timer.run_once():
            pass
        clock.advance_ms(min(step_ms, end_ms - clock.now_ms()))
    while service.timer.run_once():
        pass


def delivered(store: StoreDouble, topic: str) -> list[StoredMessage]:
    return store.messages(topic)


def lateness_ms(record: StoredMessage) -> int:
    return record.store_timestamp_ms - int(record.properties["TIMER_DELIVER_MS"])
