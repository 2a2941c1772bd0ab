"""GroupRetryPolicy: RocketMQ's JSON shape, its delays per attempt, durations as people write them."""

from __future__ import annotations

import pytest

from services.domain.retry_policy import (
    CUSTOMIZED_NEXT_MS_DEFAULT,
    EXPONENTIAL,
    CustomizedRetryPolicy,
    ExponentialRetryPolicy,
    GroupRetryPolicy,
    format_duration_ms,
    parse_duration_ms,
    parse_durations_ms,
)


@pytest.mark.parametrize(
    ("obj", "policy"),
    [
        ({"type": "CUSTOMIZED"}, GroupRetryPolicy()),
        (
            {"customizedRetryPolicy": {"next": [1000, 5000, 10000]}, "type": "CUSTOMIZED"},
            GroupRetryPolicy(customized=CustomizedRetryPolicy((1000, 5000, 10000))),
        ),
        (
            {"exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 3}, "type": "EXPONENTIAL"},
            GroupRetryPolicy(EXPONENTIAL, exponential=ExponentialRetryPolicy(1000, 60000, 3)),
        ),
        (  # both parts stored (RocketMQ keeps whatever was set); the type chooses
            {
                "customizedRetryPolicy": {"next": [2000]},
                "exponentialRetryPolicy": {"initial": 1000, "max": 2000, "multiplier": 2},
                "type": "EXPONENTIAL",
            },
            GroupRetryPolicy(EXPONENTIAL, ExponentialRetryPolicy(1000, 2000, 2), CustomizedRetryPolicy((2000,))),
        ),
    ],
)
def test_json_round_trip(obj, policy):
    assert GroupRetryPolicy.from_json(obj) == policy
    assert policy.to_json() == obj


def test_absent_json_fields_take_the_java_initial_values():
    assert GroupRetryPolicy.from_json(None) == GroupRetryPolicy()
    partial = GroupRetryPolicy.from_json({"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000}})
    assert partial.exponential == ExponentialRetryPolicy(1000, 7_200_000, 2)
    bare = GroupRetryPolicy.from_json({"customizedRetryPolicy": {}})
    assert bare.customized == CustomizedRetryPolicy(CUSTOMIZED_NEXT_MS_DEFAULT) and not bare.is_default


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "LINEAR"},
        {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": []}},
        {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1000, "5s"]}},
        {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [0]}},
        {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 5000, "max": 1000, "multiplier": 2}},
        {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000, "max": 5000, "multiplier": 1.5}},
        [],
    ],
)
def test_malformed_json_is_refused(obj):
    with pytest.raises(ValueError):
        GroupRetryPolicy.from_json(obj)


def test_server_delay_per_reconsume_times_is_rocketmqs():
    """RetryPolicy.nextDelayDuration: customized next[reconsume_times + 2] clamped, exponential
    initial * multiplier ** reconsume_times capped at max."""
    default = GroupRetryPolicy()
    assert [default.next_delay_ms(n) for n in (-1, 0, 1, 15, 16, 40)] == [10_000, 10_000, 30_000, 7_200_000] + [
        7_200_000
    ] * 2
    custom = GroupRetryPolicy.of(CustomizedRetryPolicy((1_000, 2_000, 3_000, 4_000)))
    assert [custom.next_delay_ms(n) for n in range(4)] == [3_000, 4_000, 4_000, 4_000]
    exponential = GroupRetryPolicy.of(ExponentialRetryPolicy(1_000, 10_000, 2))
    assert [exponential.next_delay_ms(n) for n in range(6)] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]
    assert exponential.next_delay_ms(10_000) == 10_000  # the exponent is capped at 32, no overflow
    # EXPONENTIAL without parameters: getRetryPolicy falls back to the default customized policy.
    assert GroupRetryPolicy(EXPONENTIAL).next_delay_ms(0) == 10_000


def test_client_delay_per_delivery_attempt():
    """What a v2 client nacks with after attempt n failed (the backoff in its settings)."""
    custom = CustomizedRetryPolicy((1_000, 5_000, 30_000))
    assert [custom.client_delay_ms(n) for n in (1, 2, 3, 4, 17)] == [1_000, 5_000, 30_000, 30_000, 30_000]
    exponential = ExponentialRetryPolicy(1_000, 60_000, 2)
    assert [exponential.client_delay_ms(n) for n in (1, 2, 3, 7, 8)] == [1_000, 2_000, 4_000, 60_000, 60_000]


def test_backoff_is_what_the_proxy_sends():
    assert GroupRetryPolicy().backoff() == CustomizedRetryPolicy()
    assert GroupRetryPolicy(EXPONENTIAL).backoff() == ExponentialRetryPolicy()
    assert GroupRetryPolicy().is_default and not GroupRetryPolicy(EXPONENTIAL).is_default


def test_durations():
    assert [parse_duration_ms(t) for t in ("1500", "250ms", "1s", "2m", "1h", "1d", " 5s ")] == [
        1_500,
        250,
        1_000,
        120_000,
        3_600_000,
        86_400_000,
        5_000,
    ]
    assert parse_durations_ms("1s,5s,1m") == (1_000, 5_000, 60_000)
    for bad in ("", "1.5s", "-1s", "5 sec", "1s,"):
        with pytest.raises(ValueError):
            parse_durations_ms(bad)
    assert [format_duration_ms(ms) for ms in (1_000, 90_000, 1_500, 3_600_000, 0)] == [
        "1s",
        "90s",
        "1500ms",
        "1h",
        "0ms",
    ]
    assert GroupRetryPolicy.of(CustomizedRetryPolicy((1_000, 1_500))).describe() == "customized 1s,1500ms"
    assert GroupRetryPolicy.of(ExponentialRetryPolicy(1_000, 60_000, 2)).describe() == "exponential 1s..1m x2"
    assert GroupRetryPolicy().describe() == "default"
