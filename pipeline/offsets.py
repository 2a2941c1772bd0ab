"""Per-queue offsets: the JSON form, canonical order, and the proportional rate limit.

A queue is ``(topic, brokerName, queueId)``. An offset is the **next** queue offset to read,
so a range is ``[start, end)`` (a ConsumeQueue's max offset is already exclusive).

JSON (the form of apache/rocketmq-externals rocketmq-spark, a level per topic, broker and queue)::

    {"TopicA": {"broker-a": {"0": 23, "1": 24}}, "TopicB": {"broker-a": {"0": 0}}}

* Input may also be Kafka's 2-level form ``{"TopicA": {"0": 23}}``; the broker is then filled
  in from the route (which must have exactly one broker for that topic).
* In user input -2 means earliest and -1 latest; they are resolved against the broker
  (``QueryOffset``) and never appear in what we return.
* **Canonical order**: topics sorted, then broker names, then queue ids numerically. Spark
  compares offsets by their JSON text: a dict in another order looks like new data and starts
  an empty micro-batch, forever (pipeline/README.md, "Spark's rules" 5). Every offset we hand
  to Spark goes through ``to_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pipeline.errors import OptionError

EARLIEST = -2
LATEST = -1
ANY_BROKER = ""  # the broker of a 2-level entry, until the route fills it in

Queue = tuple[str, str, int]  # (topic, brokerName, queueId)
NestedOffsets = dict[str, dict[str, dict[str, int]]]  # topic -> broker -> queue id -> offset (the JSON form)


def _queue_id(text: str, option: str) -> int:
    if not isinstance(text, str) or not text.isdigit():
        raise OptionError(f"option {option!r}: queue id {text!r} is not a non-negative decimal integer")
    return int(text)


def _offset(value: object, option: str, allow_special: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"option {option!r}: offset {value!r} is not an integer")
    if value < 0 and not (allow_special and value in (EARLIEST, LATEST)):
        raise OptionError(
            f"option {option!r}: offset {value} is negative"
            + (" (only -2 = earliest and -1 = latest are allowed)" if allow_special else "")
        )
    return value


def parse_offsets(text: str, option: str, allow_special: bool = True) -> dict[Queue, int]:
    """``{"T":{"broker":{"0":5}}}`` or ``{"T":{"0":5}}`` -> {(topic, broker, queue id): offset}.

    A 2-level entry gets broker ``ANY_BROKER`` (see ``resolve_brokers``).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {option!r}: not valid JSON ({exc.msg} at position {exc.pos}): {text!r}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(
            f"option {option!r}: expected a JSON object "
            '{"topic": {"brokerName": {"queueId": offset}}}, got ' + repr(text)
        )
    out: dict[Queue, int] = {}
    for topic, inner in data.items():
        if not isinstance(inner, dict) or not inner:
            raise OptionError(f"option {option!r}: topic {topic!r} must map to a non-empty JSON object")
        for key, value in inner.items():
            if isinstance(value, dict):  # 3-level: broker -> {queue: offset}
                if not value:
                    raise OptionError(f"option {option!r}: broker {key!r} of topic {topic!r} lists no queue")
                for queue, offset in value.items():
                    out[(topic, key, _queue_id(queue, option))] = _offset(offset, option, allow_special)
            else:  # 2-level: queue -> offset
                out[(topic, ANY_BROKER, _queue_id(key, option))] = _offset(value, option, allow_special)
    return out


def parse_assign(text: str, option: str = "assign") -> list[Queue]:
    """``{"T":{"broker-a":[0,1]}}`` or ``{"T":[0,1]}`` -> queues (broker ``ANY_BROKER`` for the
    2-level form)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {option!r}: not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f'option {option!r}: expected {{"topic": {{"brokerName": [queueIds]}}}}, got {text!r}')
    queues: list[Queue] = []

    def ids(values: object, where: str) -> list[int]:
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)
        ):
            raise OptionError(f"option {option!r}: {where} must be a non-empty list of queue ids")
        return values

    for topic, inner in data.items():
        if isinstance(inner, list):
            queues += [(topic, ANY_BROKER, q) for q in ids(inner, f"topic {topic!r}")]
        elif isinstance(inner, dict) and inner:
            for broker, values in inner.items():
                queues += [(topic, broker, q) for q in ids(values, f"broker {broker!r} of topic {topic!r}")]
        else:
            raise OptionError(f"option {option!r}: topic {topic!r} must map to a broker object or a list")
    return sorted(set(queues), key=queue_order)


def resolve_brokers(offsets: Mapping[Queue, int], brokers_of: Mapping[str, list[str]], option: str) -> dict[Queue, int]:
    """Fill in the broker of 2-level entries from the route (``brokers_of[topic]``)."""
    out: dict[Queue, int] = {}
    for (topic, broker, queue), offset in offsets.items():
        if broker == ANY_BROKER:
            names = brokers_of.get(topic, [])
            if len(names) != 1:
                raise OptionError(
                    f"option {option!r}: topic {topic!r} uses the 2-level form but has "
                    f"{len(names)} brokers {sorted(names)}; name the broker "
                    '({"topic": {"brokerName": {"queueId": offset}}})'
                )
            broker = names[0]
        out[(topic, broker, queue)] = offset
    return out


def queue_order(queue: Queue) -> tuple[str, str, int]:
    return queue


def canonical(offsets: Mapping[Queue, int]) -> NestedOffsets:
    """The nested dict in canonical order (topics, brokers sorted; queue ids numerically)."""
    nested: NestedOffsets = {}
    for topic, broker, queue in sorted(offsets, key=queue_order):
        nested.setdefault(topic, {}).setdefault(broker, {})[str(queue)] = int(offsets[(topic, broker, queue)])
    return nested


def to_json(offsets: Mapping[Queue, int]) -> str:
    return json.dumps(canonical(offsets))


def from_nested(nested: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[Queue, int]:
    """The inverse of ``canonical`` (a checkpointed offset; no -1/-2 in it)."""
    return {
        (topic, broker, int(queue)): int(offset)
        for topic, brokers in nested.items()
        for broker, queues in brokers.items()
        for queue, offset in queues.items()
    }


def rate_limit(start: Mapping[Queue, int], end: Mapping[Queue, int], limit: int) -> dict[Queue, int]:
    """Advance at most ``limit`` offsets in total from ``start`` towards ``end``, split in
    proportion to each queue's backlog (Kafka's maxOffsetsPerTrigger split, made exact):

    * the result never passes ``end`` and the total advance is ``min(limit, backlog)``;
    * when ``limit`` allows, every queue with a backlog advances by at least 1 (none starves);
      the rest is shared in proportion to the remaining backlogs, leftovers going to the
      largest fractional shares (ties in canonical queue order);
    * when ``limit`` is below the number of queues with a backlog, the largest backlogs get 1.

    ``start`` must hold every queue of ``end``.
    """
    if limit <= 0:
        raise ValueError("limit must be positive")
    sizes = {q: max(0, end[q] - start[q]) for q in end}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    waiting = sorted((q for q in sizes if sizes[q] > 0), key=lambda q: (-sizes[q], q))
    grant = dict.fromkeys(end, 0)
    if limit < len(waiting):
        for q in waiting[:limit]:
            grant[q] = 1
    else:
        for q in waiting:
            grant[q] = 1
        budget = limit - len(waiting)
        rest = {q: sizes[q] - 1 for q in waiting}
        rest_total = sum(rest.values())
        shares = {q: budget * rest[q] / rest_total for q in waiting} if rest_total else {}
        floors = {q: min(rest[q], int(shares[q])) for q in shares}
        left = budget - sum(floors.values())
        for q in sorted(shares, key=lambda q: (-(shares[q] - floors[q]), q)):
            if left <= 0:
                break
            if floors[q] < rest[q]:
                floors[q] += 1
                left -= 1
        for q, extra in floors.items():
            grant[q] += extra
    return {q: start[q] + grant[q] for q in end}
