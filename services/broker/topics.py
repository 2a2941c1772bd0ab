"""TopicRegistry: topic configs read from the store, cached briefly, auto-created on demand.

Every SendMessage needs its topic's write queue count, permission and message type; asking
the store each time would cost one store RPC per send and defeat send coalescing. Configs are
cached for ``topic_cache_ttl_ms`` (changes made through the store API take effect within that
time), and "no such topic" for ``topic_cache_miss_ttl_ms`` when auto-create is off.

An unknown topic is TOPIC_NOT_FOUND (40402), as from RocketMQ 5's proxy: topics are created
first (``pyrmq topic create``, the Admin API; ``mqadmin updateTopic`` upstream). Its message is the
proxy's (:func:`topic_not_found`), then how to create the topic. Auto-create
(``auto_create_topic_enable``, off by default; a broker's ``autoCreateTopicEnable``) instead
creates the topic in the store with ``auto_create_topic_queue_nums`` queues and
``auto_create_topic_message_type`` (MIXED by default: RocketMQ would create a NORMAL topic,
which makes the official clients refuse FIFO/DELAY/TRANSACTION sends until an operator sets
the type).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from services.broker.config import BrokerConfig
from services.broker.errors import Code, NotFoundError
from services.runtime.clock import Clock
from services.store.client.model import TopicInfo

log = logging.getLogger(__name__)

PERM_READ_WRITE = 6
TOPIC_NOT_EXIST = 17  # the remoting ResponseCode a name server answers for a topic without a route


def topic_not_found(name: str) -> NotFoundError:
    """TOPIC_NOT_FOUND for a topic the store does not have, worded as the proxy words it.

    The proxy's route lookup fails with ``MQClientException(TOPIC_NOT_EXIST, "No topic route info
    in name server for the topic: " + topic)``, whose message is ``"CODE: 17  DESC: " + that`` (two
    spaces) and RocketMQ's FAQ address on a second line; its status carries that message, for
    QueryRoute, ReceiveMessage, QueryAssignment and (with its topic type check off) SendMessage.
    pyrmq puts how to create the topic where the FAQ address was.
    """
    return NotFoundError(
        f"CODE: {TOPIC_NOT_EXIST}  DESC: No topic route info in name server for the topic: {name}, "
        f"create it first (pyrmq topic create {name} --type NORMAL)",
        Code.TOPIC_NOT_FOUND,
    )


class TopicSource(Protocol):
    """The store calls the registry needs (see put_coalescer.BrokerStore)."""

    def get_topic(self, name: str) -> TopicInfo | None: ...
    def create_topic(self, topic: TopicInfo) -> TopicInfo: ...


class TopicRegistry:
    def __init__(self, config: BrokerConfig, store: TopicSource, clock: Clock) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        # name -> (config or None for "absent", expiry in clock ms)
        self._cache: dict[str, tuple[TopicInfo | None, int]] = {}

    @property
    def auto_create_enabled(self) -> bool:
        return self._config.auto_create_topic_enable

    def find(self, name: str) -> TopicInfo | None:
        """The topic's config, None if the store has no such topic (cached either way)."""
        now_ms = self._clock.now_ms()
        entry = self._cache.get(name)
        if entry is not None and entry[1] > now_ms:
            return entry[0]
        topic = self._store.get_topic(name)
        self._remember(name, topic, now_ms)
        return topic

    def get(self, name: str, create: bool | None = None) -> TopicInfo:
        """The topic's config; creates it if absent and auto-create is on, else TOPIC_NOT_FOUND.

        ``name`` must already be validated. May call the store (on a cache miss).
        """
        topic = self.find(name)
        if topic is not None:
            return topic
        if create if create is not None else self._config.auto_create_topic_enable:
            return self._create(name, self._clock.now_ms())
        raise topic_not_found(name)

    def invalidate(self, name: str) -> None:
        """Forget a cached config (e.g. the store refused a queue id from it)."""
        with self._lock:
            self._cache.pop(name, None)

    def _create(self, name: str, now_ms: int) -> TopicInfo:
        nums = self._config.auto_create_topic_queue_nums
        topic = self._store.create_topic(
            TopicInfo(
                name=name,
                read_queue_nums=nums,
                write_queue_nums=nums,
                perm=PERM_READ_WRITE,
                message_type=self._config.auto_create_topic_message_type,
            )
        )
        log.info("auto-created topic %s (%d queues, %s)", name, nums, topic.message_type)
        self._remember(name, topic, now_ms)
        return topic

    def _remember(self, name: str, topic: TopicInfo | None, now_ms: int) -> None:
        ttl_ms = self._config.topic_cache_ttl_ms if topic is not None else self._config.topic_cache_miss_ttl_ms
        with self._lock:
            self._cache[name] = (topic, now_ms + ttl_ms)
