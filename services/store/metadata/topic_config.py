"""Topic and subscription-group tables: ``config/topics.json`` and
``config/subscriptionGroup.json``, rewritten whole on every change (as RocketMQ does).

    topics.json            {"dataVersion":{…},"topicConfigTable":{"<topic>":{TopicConfig}}}
    subscriptionGroup.json {"dataVersion":{…},"forbiddenTable":{…},
                            "subscriptionGroupTable":{"<group>":{SubscriptionGroupConfig}}}

Tables are written in the iteration order of RocketMQ's ``ConcurrentHashMap(1024)`` (a
2048-bucket table), so the same content gives the same bytes as a Java broker (exact while
no bucket holds two keys inserted in a different order, and below 1536 entries).

Replication (ha/config_sync.py): a slave ``install``s the master's content of the file, and refuses
every change (``check_writable``, given by the store). ``change_count`` moves on every change,
install and load: what the master's sender and the store's caches compare.

Locking: ``_persist_lock -> _lock``. A change holds ``_persist_lock`` from the mutation to the
end of the file write, so files are written in change order; ``_lock`` is held only while
the dict is touched, so ``get`` never waits for an fsync.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from services.runtime.clock import Clock
from services.store.metadata.config_files import (
    SUBSCRIPTION_GROUP_FILE,
    TOPICS_FILE,
    DataVersion,
    SubscriptionGroupConfig,
    TopicConfig,
    always_writable,
    hashmap_ordered,
    json_int,
    json_object,
    json_str,
    load_with_backup,
    write_atomically,
)
from services.store.metadata.fastjson import Bean, dumps, loads

JAVA_TABLE_CAPACITY = 2048  # ConcurrentHashMap(1024): tableSizeFor(1024 + 512 + 1)

C = TypeVar("C", TopicConfig, SubscriptionGroupConfig)


class _ConfigTable(Generic[C]):
    """name -> config, persisted whole on each change; subclasses name the file and fields."""

    file_name: str
    table_key: str
    config_type: type[C]
    name_field: str  # the JSON field holding the name, filled from the key when absent

    def __init__(self, config_dir: Path, clock: Clock, check_writable: Callable[[], None] = always_writable) -> None:
        self.path = Path(config_dir) / self.file_name
        self._clock = clock
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._table: dict[str, C] = {}
        self._data_version = DataVersion(timestamp_ms=clock.now_ms())
        self._changes = 0
        self.check_writable = check_writable  # the store's: raises NotMasterWriteError unless the writable master

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return DataVersion(
                self._data_version.counter, self._data_version.state_version, self._data_version.timestamp_ms
            )

    @property
    def change_count(self) -> int:
        """Moves on every change of the table (its own, an install, a load)."""
        return self._changes

    def load(self) -> None:
        """Read the file (or its ``.bak``); neither present -> empty table, counter 0."""
        loaded = load_with_backup(self.path, self._decode)
        with self._persist_lock, self._lock:
            if loaded is None:
                loaded = {}, DataVersion(timestamp_ms=self._clock.now_ms()), self._decode_extra({})
            self._table, self._data_version, extra = loaded
            self._set_extra_locked(extra)
            self._changes += 1

    def install(self, text: str) -> None:
        """Replace the table by ``text``, the master's content of the file (a slave), and write
        it as every change is written. Raises ValueError (nothing changes) if it does not decode."""
        table, version, extra = self._decode(text)
        with self._persist_lock:
            with self._lock:
                self._table, self._data_version = table, version
                self._set_extra_locked(extra)
                self._changes += 1
            write_atomically(self.path, text)

    def get(self, name: str) -> C | None:
        with self._lock:
            config = self._table.get(name)
        return None if config is None else config.copy()

    def list(self) -> builtins.list[C]:
        with self._lock:
            configs = builtins.list(self._table.values())
        return [config.copy() for config in configs]

    def create_or_update(self, config: C) -> C:
        """Store a copy of ``config`` and persist; an identical config changes nothing."""
        self.check_writable()
        config.check()
        stored = config.copy()
        name = self._name_of(stored)
        with self._persist_lock:
            with self._lock:
                if self._table.get(name) == stored:
                    return stored.copy()
                self._table[name] = stored
                self._data_version.next_version(self._clock.now_ms())
                self._changes += 1
                text = self._encode_locked()
            write_atomically(self.path, text)
        return stored.copy()

    def delete(self, name: str) -> bool:
        self.check_writable()
        with self._persist_lock:
            with self._lock:
                if self._table.pop(name, None) is None:
                    return False
                self._data_version.next_version(self._clock.now_ms())
                self._changes += 1
                text = self._encode_locked()
            write_atomically(self.path, text)
        return True

    def persist(self) -> None:
        with self._persist_lock:
            with self._lock:
                text = self._encode_locked()
            write_atomically(self.path, text)

    def encode(self) -> str:
        """The file's content for the current table."""
        with self._lock:
            return self._encode_locked()

    # -- per-file hooks --

    def _name_of(self, config: C) -> str:
        raise NotImplementedError

    def _extra_fields_locked(self) -> dict[str, Any]:
        return {}

    def _decode_extra(self, document: dict[Any, Any]) -> Any:
        """Decode file-level fields other than the table and dataVersion."""
        return None

    def _set_extra_locked(self, extra: Any) -> None:
        """Install what ``_decode_extra`` returned."""

    def _encode_locked(self) -> str:
        table = {name: config.to_bean() for name, config in self._table.items()}
        bean = Bean(
            dataVersion=self._data_version.to_bean(),
            **{self.table_key: hashmap_ordered(table, JAVA_TABLE_CAPACITY)},
            **self._extra_fields_locked(),
        )
        return dumps(bean)

    def _decode(self, text: str) -> tuple[dict[str, C], DataVersion, Any]:
        document = json_object(loads(text), self.file_name)
        raw_table = document.get(self.table_key)
        table: dict[str, C] = {}
        for key, value in json_object(raw_table or {}, self.table_key).items():
            name = json_str(key, self.table_key + " key")
            value = json_object(value, name)
            if value.get(self.name_field) is None:
                value = {**value, self.name_field: name}
            table[name] = self.config_type.from_json(value)
        version = DataVersion.from_json(document.get("dataVersion"), self._clock.now_ms())
        return table, version, self._decode_extra(document)


class TopicConfigManager(_ConfigTable[TopicConfig]):
    """``config/topics.json``."""

    file_name = TOPICS_FILE
    table_key = "topicConfigTable"
    config_type = TopicConfig
    name_field = "topicName"

    def _name_of(self, config: TopicConfig) -> str:
        return config.topic_name


class SubscriptionGroupManager(_ConfigTable[SubscriptionGroupConfig]):
    """``config/subscriptionGroup.json``; ``forbiddenTable`` (group -> topic -> perm bits) is
    kept as loaded and written back unchanged."""

    file_name = SUBSCRIPTION_GROUP_FILE
    table_key = "subscriptionGroupTable"
    config_type = SubscriptionGroupConfig
    name_field = "groupName"

    def __init__(self, config_dir: Path, clock: Clock, check_writable: Callable[[], None] = always_writable) -> None:
        super().__init__(config_dir, clock, check_writable)
        self._forbidden_table: dict[str, dict[str, int]] = {}

    def forbidden_table(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {group: dict(topics) for group, topics in self._forbidden_table.items()}

    def _name_of(self, config: SubscriptionGroupConfig) -> str:
        return config.group_name

    def _extra_fields_locked(self) -> dict[str, Any]:
        return {"forbiddenTable": {group: dict(topics) for group, topics in self._forbidden_table.items()}}

    def _decode_extra(self, document: dict[Any, Any]) -> dict[str, dict[str, int]]:
        raw = json_object(document.get("forbiddenTable") or {}, "forbiddenTable")
        return {
            json_str(group, "forbiddenTable key"): {
                json_str(topic, "forbiddenTable topic"): json_int(perm, "forbiddenTable perm")
                for topic, perm in json_object(topics, group).items()
            }
            for group, topics in raw.items()
        }

    def _set_extra_locked(self, extra: Any) -> None:
        self._forbidden_table = extra
