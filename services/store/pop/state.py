"""The pop engine's state (``pop.PopService``): per (group, source topic, queue) a ``QueueState``,
one pop's parameters as a ``PopRequest``, and its cache of the subscription groups. No locking
here: PopService's lock guards them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from services.domain.lite import LITE_TOPIC_PREFIX, validate_lmq_name
from services.domain.names import (
    RETRY_TOPIC_PREFIX,
    pop_retry_topic,
    retry_topic,
    validate_group_name,
    validate_topic_name,
)
from services.domain.sql_filter import SqlFilter
from services.domain.topic_types import priority_factor, priority_scan_order
from services.store.metadata.config_files import SubscriptionGroupConfig
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.pop.revive import InFlight

log = logging.getLogger(__name__)


def check_names(group: str, topic: str) -> None:
    """ValueError unless legal names; a lite topic's queue follows its parent's and its own rules."""
    lmq = topic.startswith(LITE_TOPIC_PREFIX)
    reason = validate_group_name(group) or (validate_lmq_name(topic) if lmq else validate_topic_name(topic))
    if reason:
        raise ValueError(reason)


class GroupConfigCache:
    """The subscription groups' configs, read again when the table changes."""

    def __init__(self, groups: SubscriptionGroupManager) -> None:
        self._groups = groups
        self._cache: dict[str, SubscriptionGroupConfig] = {}
        self._version = -1

    def get(self, group: str, create: bool) -> SubscriptionGroupConfig:
        """The group's config; an unknown group is created with defaults (RocketMQ's
        autoCreateSubscriptionGroup), or with ``create=False`` only assumed to have them."""
        groups = self._groups
        if groups.change_count != self._version:
            self._version = groups.change_count
            self._cache = {g.group_name: g for g in groups.list()}
        config = self._cache.get(group) or groups.get(group)  # or created since the cache was filled
        if config is None:
            config = SubscriptionGroupConfig(group_name=group)
            if create:
                config = groups.create_or_update(config)
                log.info("subscription group %s created with defaults on its first pop", group)
        return config


@dataclass(slots=True)
class QueueState:
    """``committed <= done / in flight / to redeliver < cursor`` (service.py's docstring)."""

    committed: int
    seen: int  # consumer_offsets value last read or written
    cursors: dict[str, int] = field(default_factory=dict)  # requested topic -> next offset
    done: set[int] = field(default_factory=set)  # finished offsets > committed
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    redeliver: dict[int, InFlight] = field(default_factory=dict)  # FIFO, expired: deliver again


@dataclass(frozen=True, slots=True)
class PopRequest:
    group: str
    topic: str
    max_count: int
    invisible_ms: int
    tags_codes: frozenset[int] | None
    sql: SqlFilter | None
    fifo: bool
    max_deliveries: int
    now_ms: int


def queues_to_scan(
    topics: TopicConfigManager,
    rotation: dict[tuple[str, str], int],
    group: str,
    topic: str,
    queue_id: int,
    fifo: bool,
    group_config: SubscriptionGroupConfig,
) -> list[tuple[str, int]]:
    """The (source topic, queue) a pop takes from (``pop.PopService``'s docstring); moves the
    (group, topic)'s ``rotation``."""
    if queue_id >= 0:
        return [(topic, queue_id)]
    config = topics.get(topic)
    retries = []
    if not topic.startswith(RETRY_TOPIC_PREFIX):
        retries.append((pop_retry_topic(group, topic), 0))
        legacy = retry_topic(group)
        if topics.get(legacy) is not None:
            retries.append((legacy, 0))  # redeliveries stored before issue 15: drained, never refilled
    count = rotation.get((group, topic), 0)
    rotation[(group, topic)] = count + 1
    by_priority = (
        config is not None
        and config.message_type == "PRIORITY"
        and not fifo
        and count % 100 < priority_factor(group_config.attributes)
    )
    return scan_order(topic, config.read_queue_nums if config else 0, retries, count, by_priority)


def scan_order(
    topic: str, read_queue_nums: int, retries: list[tuple[str, int]], pop_count: int, by_priority: bool
) -> list[tuple[str, int]]:
    """The queues a pop of every queue takes from, in order: the topic's queues and then its retry
    queues, from a start one further at each pop of the (group, topic); ``by_priority`` (a
    PRIORITY topic): the topic's queues from the highest level down, then the retry queues, so
    redeliveries are the lowest priority (``services/domain/topic_types.py``)."""
    if by_priority:
        return [(topic, q) for q in priority_scan_order(read_queue_nums)] + retries
    queues = [(topic, q) for q in range(read_queue_nums)] + retries
    if not queues:
        return []
    start = pop_count % len(queues)
    return queues[start:] + queues[:start]
