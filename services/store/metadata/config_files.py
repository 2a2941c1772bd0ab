"""The store's JSON metadata (``<store_root>/config``): names, validation, the config
dataclasses, ``dataVersion`` and the crash-safe write/load of one file.

The tables that use these live in ``topic_config`` (topics.json, subscriptionGroup.json) and
``consumer_offsets`` (consumerOffset.json, delayOffset.json). What each file holds:
docs/store-files.md, section 8; the JSON dialect: ``fastjson``.

Crash safety (RocketMQ 5.x ``ConfigManager.persist``, made atomic): write ``<name>.tmp`` and
fsync it; rename ``<name>`` to ``<name>.bak``; rename ``<name>.tmp`` to ``<name>``; fsync the
directory. RocketMQ renames first and then writes ``<name>`` in place; writing the temp file
first only shortens the window in which ``<name>`` is missing. At every instant either
``<name>`` is complete or it is missing and ``<name>.bak`` holds the previous content.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from services.domain.format.java_compat import java_hashmap_order
from services.domain.names import validate_group_name, validate_topic_name
from services.domain.retry_policy import GroupRetryPolicy
from services.domain.topic_types import MESSAGE_TYPE_ATTRIBUTE, TOPIC_MESSAGE_TYPES
from services.store.errors import FastjsonDecodeError, MetadataFileError
from services.store.metadata.fastjson import Bean

log = logging.getLogger(__name__)
T = TypeVar("T")


def always_writable() -> None:
    """A table's ``check_writable`` outside a replica set's store (tests, tools): never refuses."""


# -- field decoding helpers ------------------------------------------------------------------


def json_object(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, not {type(value).__name__}")
    return value


def json_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    return value


def json_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, not {value!r}")
    return value


def json_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {value!r}")
    return value


def string_map(value: Any, what: str) -> dict[str, str]:
    """A Map<String,String> (``attributes``); null reads as empty."""
    if value is None:
        return {}
    return {json_str(k, what): json_str(v, what) for k, v in json_object(value, what).items()}


def hashmap_ordered(mapping: dict[str, T], initial_capacity: int = 16) -> dict[str, T]:
    """``mapping`` re-ordered as a Java HashMap of that capacity iterates it (byte-equal files)."""
    return {key: mapping[key] for key in java_hashmap_order(list(mapping), initial_capacity)}


def _to_beans(value: Any) -> Any:
    """Loaded JSON -> writer types for nested beans: objects -> Bean, arrays -> compact."""
    if isinstance(value, dict):
        return Bean({k: _to_beans(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_to_beans(v) for v in value)
    return value


# -- config dataclasses ----------------------------------------------------------------------

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_READ_WRITE = PERM_READ | PERM_WRITE
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
# TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE (services/domain/topic_types.py). The admin API
# sends "+message.type"; the "+" (add) sign is stripped by AttributeUtil.alterCurrentAttributes
# before the map is stored.
MESSAGE_TYPES = TOPIC_MESSAGE_TYPES
JAVA_DEFAULT_QUEUE_NUMS = 16  # TopicConfig.defaultReadQueueNums: used for absent JSON fields


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 8  # our auto-create default; RocketMQ's is 16
    write_queue_nums: int = 8
    perm: int = PERM_READ_WRITE  # PERM_READ 4 | PERM_WRITE 2 | PERM_INHERIT 1
    order: bool = False
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def message_type(self) -> str:
        """``message.type`` attribute; absent or unknown (incl. Java's UNSPECIFIED) -> NORMAL."""
        value = self.attributes.get(MESSAGE_TYPE_ATTRIBUTE)
        if value is None:  # tolerate the request-form key, should a file carry it
            value = self.attributes.get("+" + MESSAGE_TYPE_ATTRIBUTE)
        return value if value in MESSAGE_TYPES else "NORMAL"

    @message_type.setter
    def message_type(self, value: str) -> None:
        if value not in MESSAGE_TYPES:
            raise ValueError(f"message type must be one of {MESSAGE_TYPES}, not {value!r}")
        self.attributes.pop("+" + MESSAGE_TYPE_ATTRIBUTE, None)
        self.attributes[MESSAGE_TYPE_ATTRIBUTE] = value

    def copy(self) -> TopicConfig:
        return TopicConfig(
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.order,
            self.topic_filter_type,
            self.topic_sys_flag,
            dict(self.attributes),
        )

    def check(self) -> None:
        """Raise ValueError unless the config can be stored."""
        reason = validate_topic_name(self.topic_name)
        if reason:
            raise ValueError(reason)
        if self.read_queue_nums < 0 or self.write_queue_nums < 0:
            raise ValueError("queue nums must not be negative")
        if not 0 <= self.perm <= 0xF:
            raise ValueError(f"perm must be in [0, 15], not {self.perm}")
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topic_filter_type must be one of {TOPIC_FILTER_TYPES}")

    def to_bean(self) -> Bean:
        return Bean(
            attributes=hashmap_ordered(self.attributes),
            order=self.order,
            perm=self.perm,
            readQueueNums=self.read_queue_nums,
            topicFilterType=self.topic_filter_type,
            topicName=self.topic_name,
            topicSysFlag=self.topic_sys_flag,
            writeQueueNums=self.write_queue_nums,
        )

    @classmethod
    def from_json(cls, obj: Any) -> TopicConfig:
        """From one ``topicConfigTable`` value (4.x has no ``attributes``)."""
        obj = json_object(obj, "topic config")
        get = obj.get
        return cls(
            topic_name=json_str(get("topicName"), "topicName"),
            read_queue_nums=json_int(get("readQueueNums", JAVA_DEFAULT_QUEUE_NUMS), "readQueueNums"),
            write_queue_nums=json_int(get("writeQueueNums", JAVA_DEFAULT_QUEUE_NUMS), "writeQueueNums"),
            perm=json_int(get("perm", PERM_READ_WRITE), "perm"),
            order=json_bool(get("order", False), "order"),
            topic_filter_type=json_str(get("topicFilterType", "SINGLE_TAG"), "topicFilterType"),
            topic_sys_flag=json_int(get("topicSysFlag", 0), "topicSysFlag"),
            attributes=string_map(get("attributes"), "attributes"),
        )


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False  # FIFO group
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    attributes: dict[str, str] = field(default_factory=dict)
    # groupRetryPolicy: the delays before redeliveries (services/domain/retry_policy.py).
    group_retry_policy: GroupRetryPolicy = field(default_factory=GroupRetryPolicy)
    # SimpleSubscriptionData beans (topic, expressionType, expression, version); None = null.
    subscription_data_set: list[dict[str, Any]] | None = None

    def copy(self) -> SubscriptionGroupConfig:
        return copy.deepcopy(self)

    def check(self) -> None:
        """Raise ValueError unless the config can be stored."""
        reason = validate_group_name(self.group_name)
        if reason:
            raise ValueError(reason)
        if self.retry_queue_nums < 0:
            raise ValueError("retry_queue_nums must not be negative")
        self.group_retry_policy.check()

    def to_bean(self) -> Bean:
        data_set = self.subscription_data_set
        return Bean(
            attributes=hashmap_ordered(self.attributes),
            brokerId=self.broker_id,
            consumeBroadcastEnable=self.consume_broadcast_enable,
            consumeEnable=self.consume_enable,
            consumeFromMinEnable=self.consume_from_min_enable,
            consumeMessageOrderly=self.consume_message_orderly,
            consumeTimeoutMinute=self.consume_timeout_minute,
            groupName=self.group_name,
            groupRetryPolicy=_to_beans(self.group_retry_policy.to_json()),
            groupSysFlag=self.group_sys_flag,
            notifyConsumerIdsChangedEnable=self.notify_consumer_ids_changed_enable,
            retryMaxTimes=self.retry_max_times,
            retryQueueNums=self.retry_queue_nums,
            subscriptionDataSet=None if data_set is None else _to_beans(data_set),
            whichBrokerWhenConsumeSlowly=self.which_broker_when_consume_slowly,
        )

    @classmethod
    def from_json(cls, obj: Any) -> SubscriptionGroupConfig:
        """From one ``subscriptionGroupTable`` value (4.x lacks the 5.x fields)."""
        obj = json_object(obj, "subscription group config")
        get = obj.get
        policy = get("groupRetryPolicy")
        data_set = get("subscriptionDataSet")
        if data_set is not None and not isinstance(data_set, list):
            raise ValueError("subscriptionDataSet must be an array")
        return cls(
            group_name=json_str(get("groupName"), "groupName"),
            consume_enable=json_bool(get("consumeEnable", True), "consumeEnable"),
            consume_from_min_enable=json_bool(get("consumeFromMinEnable", True), "consumeFromMinEnable"),
            consume_broadcast_enable=json_bool(get("consumeBroadcastEnable", True), "consumeBroadcastEnable"),
            consume_message_orderly=json_bool(get("consumeMessageOrderly", False), "consumeMessageOrderly"),
            retry_queue_nums=json_int(get("retryQueueNums", 1), "retryQueueNums"),
            retry_max_times=json_int(get("retryMaxTimes", 16), "retryMaxTimes"),
            broker_id=json_int(get("brokerId", 0), "brokerId"),
            which_broker_when_consume_slowly=json_int(
                get("whichBrokerWhenConsumeSlowly", 1), "whichBrokerWhenConsumeSlowly"
            ),
            notify_consumer_ids_changed_enable=json_bool(
                get("notifyConsumerIdsChangedEnable", True), "notifyConsumerIdsChangedEnable"
            ),
            group_sys_flag=json_int(get("groupSysFlag", 0), "groupSysFlag"),
            consume_timeout_minute=json_int(get("consumeTimeoutMinute", 15), "consumeTimeoutMinute"),
            attributes=string_map(get("attributes"), "attributes"),
            group_retry_policy=GroupRetryPolicy.from_json(policy),
            subscription_data_set=data_set,
        )


# -- dataVersion -----------------------------------------------------------------------------


@dataclass
class DataVersion:
    """RocketMQ DataVersion: bumped (counter + 1, timestamp = now) on every change."""

    counter: int = 0
    state_version: int = 0
    timestamp_ms: int = 0

    def next_version(self, now_ms: int) -> None:
        self.counter += 1
        self.timestamp_ms = now_ms

    def to_bean(self) -> Bean:
        return Bean(counter=self.counter, stateVersion=self.state_version, timestamp=self.timestamp_ms)

    @classmethod
    def from_json(cls, obj: Any, now_ms: int) -> DataVersion:
        """``obj`` is the file's ``dataVersion`` or None (4.x files): then counter 0, ts now."""
        if obj is None:
            return cls(timestamp_ms=now_ms)
        obj = json_object(obj, "dataVersion")
        return cls(
            counter=json_int(obj.get("counter", 0), "dataVersion.counter"),
            state_version=json_int(obj.get("stateVersion", 0), "dataVersion.stateVersion"),
            timestamp_ms=json_int(obj.get("timestamp", now_ms), "dataVersion.timestamp"),
        )


# -- one file: atomic write, load with fallback ----------------------------------------------

TOPICS_FILE = "topics.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
BACKUP_SUFFIX = ".bak"
TEMP_SUFFIX = ".tmp"  # ours; RocketMQ never creates it and ignores it
CORRUPT_SUFFIX = ".corrupt"  # ours: an unreadable main file is set aside, not deleted


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8), keeping the previous content as ``path.bak``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _sibling(path, TEMP_SUFFIX)
    with open(temp, "wb") as file:
        file.write(text.encode("utf-8"))
        file.flush()
        os.fsync(file.fileno())
    try:
        os.replace(path, _sibling(path, BACKUP_SUFFIX))
    except FileNotFoundError:
        pass  # first write, or a crash between the two renames last time
    os.replace(temp, path)
    _fsync_dir(path.parent)


def load_with_backup(path: Path, decode: Callable[[str], T]) -> T | None:
    """``decode`` of ``path``, else of ``path.bak``; None if neither has content.

    A missing or blank file counts as absent. A file that does not decode falls back to the
    ``.bak``; when the ``.bak`` is used, the bad main file is set aside (``.corrupt``) so the
    next write cannot rotate it over the good ``.bak``. Raises MetadataFileError when a file
    had content but nothing decodes (starting empty would silently lose metadata).
    """
    backup = _sibling(path, BACKUP_SUFFIX)
    errors: list[str] = []
    for candidate in (path, backup):
        try:
            text = candidate.read_bytes().decode("utf-8")
        except FileNotFoundError:
            continue
        except UnicodeDecodeError as exc:
            errors.append(f"{candidate.name}: {exc}")
            continue
        if not text.strip():
            continue
        try:
            result = decode(text)
        except (FastjsonDecodeError, ValueError, TypeError, KeyError) as exc:
            errors.append(f"{candidate.name}: {exc}")
            log.warning("cannot decode %s: %s", candidate, exc)
            continue
        if candidate is backup:
            log.warning("loaded %s from its backup %s", path, backup.name)
            _set_aside(path)
        return result
    if errors:
        raise MetadataFileError(f"cannot load {path}: " + "; ".join(errors))
    return None


def _set_aside(path: Path) -> None:
    try:
        if path.stat().st_size == 0:
            path.unlink()
        else:
            os.replace(path, _sibling(path, CORRUPT_SUFFIX))
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)
