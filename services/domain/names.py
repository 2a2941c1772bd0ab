"""RocketMQ's reserved names and the rules for topic and group names.

The constants are TopicValidator's, MixAll's, TimerMessageStore's and PopAckConstants'; the
validation is TopicValidator.validateTopic/validateGroup, with RocketMQ's own error texts.
Pure: no I/O, imports nothing else of the project.
"""

from __future__ import annotations

import re

AUTO_CREATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"
REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
# The pop engine's journal (services/domain/format/pop_journal_format.py): pyrmq's own, queue 0.
POP_JOURNAL_TOPIC = SYSTEM_TOPIC_PREFIX + "POP_JOURNAL"
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        CHECKPOINT_TOPIC,
    }
)
RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"

SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
TRANS_CHECK_GROUP = SYSTEM_GROUP_PREFIX + "TRANS"
REVIVE_GROUP = SYSTEM_GROUP_PREFIX + "REVIVE_GROUP"
# MixAll.PREDEFINE_GROUP_SET, verbatim.
PREDEFINED_GROUPS = frozenset(
    {
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        TRANS_CHECK_GROUP,
    }
)

TOPIC_NAME_LENGTH_MAX = 127
RETRY_OR_DLQ_TOPIC_NAME_LENGTH_MAX = 255
GROUP_NAME_LENGTH_MAX = 120  # so that %RETRY%{group}_{topic} stays a legal topic
_NAME_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")


POP_RETRY_SEPARATOR_V1 = "_"  # KeyBuilder: %RETRY%{group}_{topic}, RocketMQ 5's default
# (enableRetryTopicV2, off by default, would use "+": %RETRY%{group}+{topic}; pyrmq never does.)


def retry_topic(group: str) -> str:
    """The group's classic retry topic ``%RETRY%{group}`` (MixAll.getRetryTopic): where 4.x push
    consumers' send-back goes, and where pyrmq before issue 15 put every pop redelivery of the
    group. Pop redeliveries now go to ``pop_retry_topic``."""
    return RETRY_TOPIC_PREFIX + group


def pop_retry_topic(group: str, topic: str) -> str:
    """Where RocketMQ 5's pop revives a group's unacked messages of ``topic``:
    ``%RETRY%{group}_{topic}`` (KeyBuilder.buildPopRetryTopicV1, the default)."""
    return RETRY_TOPIC_PREFIX + group + POP_RETRY_SEPARATOR_V1 + topic


def dlq_topic(group: str) -> str:
    return DLQ_TOPIC_PREFIX + group


def validate_topic_name(name: str) -> str | None:
    """None if legal (TopicValidator.validateTopic), else the reason."""
    if not name or name.isspace():
        return "The specified topic is blank."
    if not _NAME_CHARS.fullmatch(name):
        return f"The specified topic: {name}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if name.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)):
        if len(name) > RETRY_OR_DLQ_TOPIC_NAME_LENGTH_MAX:
            return (
                f"The specified topic is DLQ or Retry topic: {name}, and it's longer than "
                f"topic max length: {RETRY_OR_DLQ_TOPIC_NAME_LENGTH_MAX}"
            )
    elif len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"The specified topic: {name}, is longer than topic max length: {TOPIC_NAME_LENGTH_MAX}"
    return None


def is_system_topic(name: str) -> bool:
    """TopicValidator.isSystemTopic: a reserved name or the ``rmq_sys_`` prefix."""
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX)


def validate_group_name(name: str) -> str | None:
    """None if legal (TopicValidator.validateGroup), else the reason."""
    if not name or name.isspace():
        return "The specified group is blank."
    if not _NAME_CHARS.fullmatch(name):
        return f"The specified group: {name}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(name) > GROUP_NAME_LENGTH_MAX:
        return f"The specified group: {name}, is longer than group max length: {GROUP_NAME_LENGTH_MAX}"
    return None


def is_system_group(name: str) -> bool:
    """MixAll.isSysConsumerGroup (``CID_RMQ_SYS_`` prefix) or MixAll.isPredefinedGroup."""
    return name.startswith(SYSTEM_GROUP_PREFIX) or name in PREDEFINED_GROUPS
