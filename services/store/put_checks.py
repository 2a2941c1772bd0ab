"""The store's checks of a put (``FileStore.put_batch``): topic (name, system topic, exists or
auto-created), body, queue id, then the properties and record sizes once encoded, and the batch
prepared for the CommitLog. A batch is all or nothing: the first message that cannot be stored
is named with its status."""

from __future__ import annotations

import operator
from collections.abc import Callable

from services.domain.format.commitlog_format import PROPERTIES_SIZE_MAX_BYTES, MessageRecord
from services.domain.format.properties_format import LITE_TOPIC, PropertiesError
from services.domain.lite import lmq_name
from services.domain.names import is_system_topic, validate_topic_name
from services.domain.statuses import PutStatus
from services.store.config import StoreConfig
from services.store.log.commitlog import CommitLog
from services.store.metadata.config_files import TopicConfig
from services.store.metadata.topic_config import TopicConfigManager

# The batch-wide size checks run in C over the prepared tuples (record, topic part, properties).
_RECORD = operator.itemgetter(0)
_PROPERTIES_BYTES = operator.itemgetter(2)
_TOTAL_SIZE = operator.attrgetter("total_size")


class PutChecks:
    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        topics: TopicConfigManager,
        lite_topic_count: Callable[[], int] = lambda: 0,
    ) -> None:
        self._config = config
        self._commitlog = commitlog
        self._topics = topics
        self._lite_topic_count = lite_topic_count
        self._topic_cache: dict[str, int] = {}
        self._topic_cache_version = -1

    def prepare(
        self, messages: list[MessageRecord], allow_system_topics: bool
    ) -> tuple[list[tuple[MessageRecord, bytes, bytes]], tuple[int, PutStatus, str] | None]:
        """The batch prepared for the CommitLog, and (index, status, error) of the first message
        that cannot be stored (None: all can). Cheap checks run first for the whole batch; the
        rare failing message is explained by :meth:`_validate` / :meth:`_check_sizes`."""
        topic_checks: dict[str, tuple[PutStatus | None, str, int]] = {}
        body_max = self._config.body_size_max_bytes
        first_bad: tuple[int, PutStatus, str] | None = None
        last_topic = None
        check: tuple[PutStatus | None, str, int] = (None, "", 0)  # the first message's topic sets it
        write_queue_nums = 0
        for i, rec in enumerate(messages):
            if rec.topic != last_topic:
                last_topic = rec.topic
                cached = topic_checks.get(last_topic)
                if cached is None:
                    cached = topic_checks[last_topic] = self._check_topic(last_topic, allow_system_topics)
                check = cached
                write_queue_nums = check[2]
            body = rec.body
            if check[0] is not None or body is None or len(body) > body_max or not 0 <= rec.queue_id < write_queue_nums:
                status, error = self._validate(rec, allow_system_topics, topic_checks)
                if status is not None:
                    first_bad = (i, status, error)
                    messages = messages[:i]
                    break
        if self._config.lite_topics_max and (refused := self._lite_quota(messages)) is not None:
            first_bad, messages = refused, messages[: refused[0]]
        try:
            prepared = self._commitlog.prepare_batch(messages)
        except PropertiesError as exc:
            first_bad = (exc.index, PutStatus.MESSAGE_ILLEGAL, str(exc))
            prepared = self._commitlog.prepare_batch(messages[: exc.index])
        properties_max = PROPERTIES_SIZE_MAX_BYTES - (20 if self._config.append_prop_crc else 0)
        record_max = min(self._config.record_size_max_bytes, self._config.commitlog_file_size_bytes - 8)
        if prepared and (
            max(map(len, map(_PROPERTIES_BYTES, prepared))) > properties_max
            or max(map(_TOTAL_SIZE, map(_RECORD, prepared))) > record_max
        ):
            for i, (rec, _, properties_bytes) in enumerate(prepared):  # which one (rare)
                status, error = self._check_sizes(rec, len(properties_bytes))
                if status is not None:
                    return prepared, (i, status, error)
        return prepared, first_bad

    def _lite_quota(self, messages: list[MessageRecord]) -> tuple[int, PutStatus, str] | None:
        """The first message that would start a new lite topic while the store holds
        ``lite_topics_max`` (RocketMQ's LMQ quota): the index's count plus the lite topics started
        by appends not dispatched yet (concurrent puts racing for the last place may pass it by
        the few of them that are checked before either is appended)."""
        held = -1
        lite_put_offsets = self._commitlog.lite_put_offsets
        for i, rec in enumerate(messages):
            lite = rec.properties.get(LITE_TOPIC) if rec.properties else None
            if lite is None or lite_put_offsets.next_offset(lmq_name(rec.topic, lite)):
                continue  # not a lite message, or a lite topic the store has
            if held < 0:
                dispatched = lite_put_offsets.dispatched()  # before the count: see new_pending
                held = self._lite_topic_count() + lite_put_offsets.new_pending(dispatched)
            else:
                held += 1
            if held >= self._config.lite_topics_max:
                return (
                    i,
                    PutStatus.LMQ_QUOTA_EXCEEDED,
                    (
                        f"the store holds {held} lite topics, its quota (lite_topics_max {self._config.lite_topics_max}):"
                        f" no new lite topic {lite} of {rec.topic}"
                    ),
                )
        return None

    def _validate(
        self, rec: MessageRecord, allow_system_topics: bool, topic_checks: dict[str, tuple[PutStatus | None, str, int]]
    ) -> tuple[PutStatus | None, str]:
        """Check one message; ``topic_checks`` memoises the per-topic part within a batch."""
        check = topic_checks.get(rec.topic)
        if check is None:
            check = topic_checks[rec.topic] = self._check_topic(rec.topic, allow_system_topics)
        status, error, write_queue_nums = check
        if status is not None:
            return status, error
        if rec.body is None:
            return PutStatus.MESSAGE_ILLEGAL, "message body is missing"
        if len(rec.body) > self._config.body_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, (
                f"body of {len(rec.body)} bytes exceeds the limit of {self._config.body_size_max_bytes}"
            )
        if rec.queue_id < 0 or rec.queue_id >= write_queue_nums:
            return PutStatus.QUEUE_ID_ILLEGAL, (
                f"queue id {rec.queue_id} is out of range: topic {rec.topic} has {write_queue_nums} write queues"
            )
        return None, ""  # properties are checked while they are encoded (CommitLog.prepare)

    def _check_topic(self, topic: str, allow_system_topics: bool) -> tuple[PutStatus | None, str, int]:
        """(status, error, write queue count) for puts to ``topic``; creates it when allowed."""
        error = validate_topic_name(topic)
        if error:
            return PutStatus.TOPIC_ILLEGAL, error, 0
        if is_system_topic(topic):
            if not allow_system_topics:
                return PutStatus.TOPIC_ILLEGAL, f"topic {topic} is a system topic", 0
            return None, "", 1 << 30  # internal callers choose system queues themselves
        write_queue_nums = self._write_queue_nums(topic)
        if write_queue_nums is None:
            if not self._config.auto_create_topic_enable:
                return PutStatus.TOPIC_NOT_FOUND, f"topic {topic} does not exist", 0
            nums = self._config.default_topic_queue_nums
            write_queue_nums = self._topics.create_or_update(
                TopicConfig(topic_name=topic, read_queue_nums=nums, write_queue_nums=nums)
            ).write_queue_nums
        return None, "", write_queue_nums

    def _write_queue_nums(self, topic: str) -> int | None:
        """Write queue count of ``topic`` from a cache refreshed whenever the topic table changes."""
        version = self._topics.change_count
        if version != self._topic_cache_version:
            self._topic_cache = {t.topic_name: t.write_queue_nums for t in self._topics.list()}
            self._topic_cache_version = version
        return self._topic_cache.get(topic)

    def _check_sizes(self, rec: MessageRecord, properties_len: int) -> tuple[PutStatus | None, str]:
        if self._config.append_prop_crc:
            properties_len += 20  # the CRC trailer counts too
        if properties_len > PROPERTIES_SIZE_MAX_BYTES:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED, (
                f"properties of {properties_len} bytes exceed {PROPERTIES_SIZE_MAX_BYTES}"
            )
        if rec.total_size > self._config.record_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, f"record of {rec.total_size} bytes is too large"
        segment_size = self._config.commitlog_file_size_bytes
        if rec.total_size + 8 > segment_size:
            return PutStatus.MESSAGE_ILLEGAL, (
                f"record of {rec.total_size} bytes does not fit a {segment_size}-byte segment"
            )
        return None, ""
