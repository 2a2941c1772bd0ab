"""Topic and group name rules, and RocketMQ's system topics and groups."""

from __future__ import annotations

import pytest

from services.domain.names import (
    GROUP_NAME_LENGTH_MAX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TOPIC_NAME_LENGTH_MAX,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    dlq_topic,
    is_system_group,
    is_system_topic,
    pop_retry_topic,
    retry_topic,
    validate_group_name,
    validate_topic_name,
)


@pytest.mark.parametrize(
    "name",
    [
        "TopicTest",
        "a",
        "A-b_c|d%e",
        "9",
        "x" * 127,
        "%RETRY%" + "g" * 248,
        "%DLQ%" + "g" * 250,
        SCHEDULE_TOPIC,
        "rmq_sys_wheel_timer",
    ],
)
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) is None


@pytest.mark.parametrize(
    "name, reason",
    [
        ("", "blank"),
        ("   ", "blank"),
        ("a b", "illegal characters"),
        ("a.b", "illegal characters"),
        ("a/b", "illegal characters"),
        ("topic\n", "illegal characters"),
        ("tópico", "illegal characters"),
        ("x" * 128, "max length: 127"),
        ("%RETRY%" + "g" * 249, "max length: 255"),
        ("%DLQ%" + "g" * 251, "max length: 255"),
    ],
)
def test_invalid_topic_names(name: str, reason: str) -> None:
    message = validate_topic_name(name)
    assert message is not None and reason in message


def test_retry_and_dlq_topic_lengths_at_the_boundary() -> None:
    assert len(retry_topic("g" * 248)) == 255 and validate_topic_name(retry_topic("g" * 248)) is None
    assert validate_topic_name(retry_topic("g" * 249)) is not None
    assert retry_topic("GID") == "%RETRY%GID" and dlq_topic("GID") == "%DLQ%GID"


def test_pop_retry_topic_is_rocketmq_5s_v1_name() -> None:
    assert pop_retry_topic("GID", "Orders") == "%RETRY%GID_Orders"  # KeyBuilder.buildPopRetryTopicV1
    longest = pop_retry_topic("g" * GROUP_NAME_LENGTH_MAX, "t" * TOPIC_NAME_LENGTH_MAX)
    assert len(longest) == 255 and validate_topic_name(longest) is None


@pytest.mark.parametrize(
    "name, expected",
    [
        ("TBW102", True),
        (SCHEDULE_TOPIC, True),
        ("BenchmarkTest", True),
        (TRANS_HALF_TOPIC, True),
        ("RMQ_SYS_TRACE_TOPIC", True),
        (TRANS_OP_HALF_TOPIC, True),
        (TRANS_CHECK_MAX_TIME_TOPIC, True),
        ("SELF_TEST_TOPIC", True),
        ("OFFSET_MOVED_EVENT", True),
        ("CHECKPOINT_TOPIC", True),
        (TIMER_TOPIC, True),
        ("rmq_sys_REVIVE_LOG_DefaultCluster", True),
        ("TopicTest", False),
        ("%RETRY%g", False),
        ("RMQ_SYS_OTHER", False),
        ("tbw102", False),
    ],
)
def test_system_topics(name: str, expected: bool) -> None:
    assert is_system_topic(name) is expected


def test_system_topic_constants() -> None:
    assert (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC) == (
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "rmq_sys_wheel_timer",
    )


@pytest.mark.parametrize(
    "name, reason",
    [
        ("GID_a-b|c%d", None),
        ("g" * 120, None),
        ("g" * 121, "max length: 120"),
        ("", "blank"),
        ("\t", "blank"),
        ("g g", "illegal characters"),
        ("g@h", "illegal characters"),
    ],
)
def test_group_names(name: str, reason: str | None) -> None:
    message = validate_group_name(name)
    assert (message is None) if reason is None else (message is not None and reason in message)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("CID_RMQ_SYS_TRANS", True),
        ("CID_RMQ_SYS_REVIVE_GROUP", True),
        ("CID_RMQ_SYS_anything", True),
        ("TOOLS_CONSUMER", True),
        ("FILTERSRV_CONSUMER", True),
        ("__MONITOR_CONSUMER", True),
        ("CLIENT_INNER_PRODUCER", True),
        ("SELF_TEST_P_GROUP", True),
        ("SELF_TEST_C_GROUP", True),
        ("CID_ONS-HTTP-PROXY", True),
        ("CID_ONSAPI_PERMISSION", True),
        ("CID_ONSAPI_OWNER", True),
        ("CID_ONSAPI_PULL", True),
        ("GID_order", False),
        ("CID_RMQ_SYSX", False),
        ("tools_consumer", False),
    ],
)
def test_system_groups(name: str, expected: bool) -> None:
    assert is_system_group(name) is expected
