"""Delay-level and timer messages: how a message that must wait is parked, and how it is delivered.

Delay level L (``DELAY``, RocketMQ's ``ScheduleMessageService``): parked in
``SCHEDULE_TOPIC_XXXX`` queue ``L - 1`` with REAL_TOPIC / REAL_QID (``park_delay_level``). It is
due at its store time plus the level's delay (``level_delay_ms``, also the ConsumeQueue tags
code of the record), and is then delivered to its real topic and queue with its properties
unchanged; a real topic of ``RMQ_SYS_TRANS_HALF_TOPIC`` is never delivered
(``unpark_delay_level``).

Timer (a delivery time, ``TIMER_DELIVER_MS``; RocketMQ's ``TimerMessageStore``): parked in
``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (the wheel tick, ``timer_out_ms``),
REAL_TOPIC and REAL_QID (``park_timer``). The scheduler delivers it at ``delivery_time_ms``;
when it is due, ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS`` are stamped and it goes to its
real topic and queue (``unpark_timer``), or, when it was parked beyond the wheel's window, back
into ``rmq_sys_wheel_timer`` with ``TIMER_ROLL_TIMES`` + 1 (``roll_timer``).

Recall: a DELETE marker is a timer message of the same wheel tick whose ``TIMER_DEL_UNIQKEY``
is ``delete_key(real topic, message id)``; the scheduler skips the message whose
``delete_key_of`` a marker of its tick names.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.domain.contracts.parking import park, real_destination
from services.domain.format.properties_format import (
    DELAY_TIME_LEVEL,
    REAL_TOPIC,
    TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_OUT_MS,
    TIMER_ROLL_TIMES,
    UNIQ_KEY,
)
from services.domain.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC

TIMER_QUEUE_ID = 0  # rmq_sys_wheel_timer has one queue


# -- delay levels ---------------------------------------------------------------------------------
def park_delay_level(properties: dict[str, str], topic: str, queue_id: int, level: int) -> tuple[str, int]:
    """Park a message for delay level ``level`` (>= 1): ``DELAY``, REAL_TOPIC and REAL_QID go
    into ``properties``; the (topic, queue) to put it in is returned."""
    properties[DELAY_TIME_LEVEL] = str(level)
    park(properties, topic, queue_id)
    return SCHEDULE_TOPIC, level - 1


def level_delay_ms(properties: dict[str, str], levels_ms: Sequence[int]) -> int | None:
    """The delay of the message's ``DELAY`` level (a level beyond the last counts as the last);
    None when ``DELAY`` is absent, not a number or below 1."""
    text = properties.get(DELAY_TIME_LEVEL)
    if text:
        try:
            level = min(int(text), len(levels_ms))
        except ValueError:
            level = 0
        if level > 0:
            return levels_ms[level - 1]
    return None


def unpark_delay_level(properties: dict[str, str]) -> tuple[str, int] | None:
    """Where a due delay-level message goes (its properties are delivered unchanged); None when
    it names no valid real topic and queue, or names the transaction half topic."""
    destination = real_destination(properties)
    if destination is None or destination[0] == TRANS_HALF_TOPIC:
        return None
    return destination


# -- timer ----------------------------------------------------------------------------------------
def timer_out_ms(deliver_ms: int, precision_ms: int) -> int:
    """The wheel tick of a delivery time (HookUtils: on a tick -> one tick earlier, else floor)."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def park_timer(properties: dict[str, str], topic: str, queue_id: int, tick_ms: int) -> tuple[str, int]:
    """Park a timer message of wheel tick ``tick_ms``: ``TIMER_OUT_MS``, REAL_TOPIC and REAL_QID
    go into ``properties``; the (topic, queue) to put it in is returned."""
    properties[TIMER_OUT_MS] = str(tick_ms)
    park(properties, topic, queue_id)
    return TIMER_TOPIC, TIMER_QUEUE_ID


def delivery_time_ms(properties: dict[str, str], precision_ms: int) -> int | None:
    """When a parked timer message is due: ``TIMER_DELIVER_MS`` when it agrees with the tick
    (``TIMER_OUT_MS < D <= TIMER_OUT_MS + precision``), else the end of the tick (never earlier
    than RocketMQ would deliver); None if it names no time."""
    try:
        tick_ms = int(properties[TIMER_OUT_MS]) if TIMER_OUT_MS in properties else None
        deliver_ms = int(properties[TIMER_DELIVER_MS]) if TIMER_DELIVER_MS in properties else None
    except ValueError:
        return None
    if deliver_ms is not None and (tick_ms is None or tick_ms < deliver_ms <= tick_ms + precision_ms):
        return deliver_ms
    return tick_ms + precision_ms if tick_ms is not None else None


def _stamp(properties: dict[str, str], enqueue_ms: int, dequeue_ms: int) -> None:
    properties[TIMER_ENQUEUE_MS] = str(enqueue_ms)
    properties[TIMER_DEQUEUE_MS] = str(dequeue_ms)


def unpark_timer(properties: dict[str, str], enqueue_ms: int, dequeue_ms: int) -> tuple[str, int] | None:
    """Where a due timer message goes, stamping ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` into
    ``properties`` (the rest stays, REAL_TOPIC and REAL_QID included); None when it names no
    valid real topic and queue."""
    _stamp(properties, enqueue_ms, dequeue_ms)
    return real_destination(properties)


def roll_timer(properties: dict[str, str], enqueue_ms: int, dequeue_ms: int) -> tuple[str, int]:
    """A message whose wheel unit only covered part of its wait goes back into the wheel: the
    dequeue stamps and ``TIMER_ROLL_TIMES`` + 1 go into ``properties``; (topic, queue) returned."""
    _stamp(properties, enqueue_ms, dequeue_ms)
    try:
        roll_times = int(properties.get(TIMER_ROLL_TIMES, "0"))
    except ValueError:
        roll_times = 0
    properties[TIMER_ROLL_TIMES] = str(roll_times + 1)
    return TIMER_TOPIC, TIMER_QUEUE_ID


def delete_key(real_topic: str, uniq_key: str) -> str:
    """TimerMessageStore.buildDeleteKey: the ``TIMER_DEL_UNIQKEY`` of a recall marker."""
    return f"{real_topic}+{uniq_key}"


def delete_key_of(properties: dict[str, str]) -> str | None:
    """The ``TIMER_DEL_UNIQKEY`` a marker recalling this parked message carries; None without
    REAL_TOPIC or UNIQ_KEY."""
    uniq_key = properties.get(UNIQ_KEY)
    real_topic = properties.get(REAL_TOPIC)
    if uniq_key and real_topic:
        return delete_key(real_topic, uniq_key)
    return None
