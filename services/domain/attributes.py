"""Topic and subscription-group attributes that are integers in a range (RocketMQ's
``LongRangeAttribute``: ``lite.topic.expiration``, ``priority.factor``). Pure.

An attribute map may carry the name as stored or in an admin request's form (``+name``, the add
sign ``AttributeUtil.alterCurrentAttributes`` strips); a value that is absent, not a number, or
out of its range reads as the attribute's default."""

from __future__ import annotations


def long_range_attribute(attributes: dict[str, str], name: str, low: int, high: int, default: int) -> int:
    value = attributes.get(name, attributes.get("+" + name))
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        return default
    return number if low <= number <= high else default
