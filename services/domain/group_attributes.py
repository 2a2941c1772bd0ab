"""Consumer-group attributes (RocketMQ's ``SubscriptionGroupAttributes``): the ones pyrmq knows,
what values each takes, and how the lite ones read. Pure.

| attribute | values | meaning |
|---|---|---|
| ``priority.factor`` | 0-100 (100) | share of pops of a PRIORITY topic done highest level first |
| ``lite.bind.topic`` | a topic name | the LITE parent a lite consumer group binds; a lite consumer of the group naming another gets ILLEGAL_TOPIC |
| ``lite.sub.model`` | ``Shared`` (default) or ``Exclusive`` | Exclusive: one client of the group per lite topic; a new subscriber takes it over and the previous one is told (NotifyUnsubscribeLiteCommand) |
| ``lite.sub.client.quota`` | -1 (no limit) or more (2000) | lite topics one client may subscribe (sent in the settings) |
| ``lite.sub.wildcard`` | anything (its presence counts) | every client of the group takes every lite topic of the bound parent |

An admin request sets attributes by name (``key=value``); an unknown name or a bad value is
refused with the reason, so a typo never silently does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from services.domain.attributes import long_range_attribute
from services.domain.names import validate_topic_name

PRIORITY_FACTOR = "priority.factor"
LITE_BIND_TOPIC = "lite.bind.topic"
LITE_SUB_MODEL = "lite.sub.model"
LITE_SUB_CLIENT_QUOTA = "lite.sub.client.quota"
LITE_SUB_WILDCARD = "lite.sub.wildcard"
LITE_SUB_MODELS = ("Shared", "Exclusive")
LITE_SUB_CLIENT_QUOTA_DEFAULT = 2000
QUOTA_UNLIMITED = 2**31 - 1  # what "-1" is told to clients (an int32 they compare with)


def _long_range(low: int, high: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return f"not a whole number: {value!r}"
        return None if low <= number <= high else f"must be in [{low}, {high}], not {number}"

    return check


VALIDATORS: dict[str, Callable[[str], str | None]] = {
    PRIORITY_FACTOR: _long_range(0, 100),
    LITE_BIND_TOPIC: validate_topic_name,
    LITE_SUB_MODEL: lambda v: None if v in LITE_SUB_MODELS else f"must be one of {', '.join(LITE_SUB_MODELS)}",
    LITE_SUB_CLIENT_QUOTA: _long_range(-1, 2**63 - 1),
    LITE_SUB_WILDCARD: lambda v: None,
}


def validate_group_attribute(name: str, value: str) -> str | None:
    """None if ``name=value`` is a legal group attribute, else the reason."""
    check = VALIDATORS.get(name)
    if check is None:
        return f"unknown group attribute {name!r} (known: {', '.join(sorted(VALIDATORS))})"
    reason = check(value)
    return f"group attribute {name}: {reason}" if reason else None


def lite_bind_topic(attributes: dict[str, str]) -> str:
    """The parent a lite consumer group binds ("" if none)."""
    return attributes.get(LITE_BIND_TOPIC, "")


def lite_exclusive(attributes: dict[str, str]) -> bool:
    return attributes.get(LITE_SUB_MODEL) == "Exclusive"


def lite_wildcard(attributes: dict[str, str]) -> bool:
    return LITE_SUB_WILDCARD in attributes


def lite_client_quota(attributes: dict[str, str], default: int = LITE_SUB_CLIENT_QUOTA_DEFAULT) -> int:
    """Lite topics one client of the group may subscribe (-1 in the attribute: ``QUOTA_UNLIMITED``)."""
    quota = long_range_attribute(attributes, LITE_SUB_CLIENT_QUOTA, -1, 2**63 - 1, default)
    return QUOTA_UNLIMITED if quota < 0 else min(quota, QUOTA_UNLIMITED)
