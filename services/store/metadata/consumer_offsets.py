"""Consumer and delay-level progress: ``config/consumerOffset.json`` and
``config/delayOffset.json``.

    consumerOffset.json {"dataVersion":{…},"groupTopicMap":{"<group>":["<topic>",…]},
                         "offsetTable":{"<topic>@<group>":{<queueId>:<nextOffset>,…}}}
    delayOffset.json    {"dataVersion":{…},"offsetTable":{<level>:<nextCqOffset>,…}}

4.x files have only ``offsetTable``. ``groupTopicMap`` is derived (a getter in RocketMQ 5)
and ignored on load. Commits only update memory and mark the table dirty; the owner calls
``persist_if_dirty`` periodically (RocketMQ: every 5 s for offsets, 10 s for delay levels)
and ``persist`` at shutdown. ``dataVersion`` is bumped once per persist that has changes
(RocketMQ bumps every N commits, ``consumerOffsetUpdateVersionStep``).

Write order matches a Java broker: ``offsetTable`` keys as its ``ConcurrentHashMap(512)``
iterates them, queue ids and levels ascending (what Integer-keyed Java maps give for small
ids), ``groupTopicMap`` as a ``HashMap(128)`` of ``HashSet(8)``s (a Set: written compact).

Replication (ha/config_sync.py): ``change_count`` moves on every commit and on every persist that
bumps ``dataVersion``, so the master sends the current table when it changed and again once the
version it writes moved; a slave ``install``s it (memory and file). A slave refuses delay-offset
updates (``check_writable``, given by the store); consumer offsets are committed through the pop
engine, which refuses them.

Locking: ``_persist_lock -> _lock``. ``_lock`` guards the table and the dirty flag only;
``persist`` copies the table under it and encodes and writes outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from services.domain.format.java_compat import java_hashmap_order
from services.domain.lite import LITE_TOPIC_PREFIX
from services.runtime.clock import Clock
from services.store.lite.consumer_offsets import LiteConsumerOffsets
from services.store.metadata.config_files import (
    CONSUMER_OFFSET_FILE,
    DELAY_OFFSET_FILE,
    DataVersion,
    always_writable,
    hashmap_ordered,
    json_int,
    json_object,
    json_str,
    load_with_backup,
    write_atomically,
)
from services.store.metadata.fastjson import Bean, dumps, loads

TOPIC_GROUP_SEPARATOR = "@"
OFFSET_TABLE_JAVA_CAPACITY = 1024  # ConcurrentHashMap(512): tableSizeFor(512 + 256 + 1)
GROUP_TOPIC_MAP_JAVA_CAPACITY = 128  # new HashMap<>(128)
GROUP_TOPIC_SET_JAVA_CAPACITY = 8  # new HashSet<>(8)


def _int_key(key: Any, what: str) -> int:
    """fastjson writes Integer keys bare; a quoted ``"3"`` reads the same in Java."""
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    return json_int(key, what)


def _int_table(value: Any, what: str) -> dict[int, int]:
    return {_int_key(k, what): json_int(v, what) for k, v in json_object(value, what).items()}


class _ProgressFile:
    """A table persisted on demand: dirty flag, dataVersion, atomic write."""

    file_name: str

    def __init__(self, config_dir: Path, clock: Clock, check_writable: Callable[[], None] = always_writable) -> None:
        self.path = Path(config_dir) / self.file_name
        self._clock = clock
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._dirty = False
        self._data_version = DataVersion(timestamp_ms=clock.now_ms())
        self._table: Any = self._decode_table({})
        self._changes = 0
        self.check_writable = check_writable  # the store's: raises NotMasterWriteError unless the writable master

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            version = self._data_version
            return DataVersion(version.counter, version.state_version, version.timestamp_ms)

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def change_count(self) -> int:
        """Moves on every change of the table, on each persist that bumps dataVersion, on load
        and install."""
        return self._changes

    def persist(self) -> None:
        """Write the table now (bumping dataVersion if it changed since the last write)."""
        with self._persist_lock:
            with self._lock:
                if self._dirty:
                    self._data_version.next_version(self._clock.now_ms())
                    self._dirty = False
                    self._changes += 1
                version = self._data_version.to_bean()
                snapshot = self._snapshot_locked()
            try:
                write_atomically(self.path, self._encode(version, snapshot))
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise

    def persist_if_dirty(self) -> bool:
        """Persist if anything changed since the last write; True if it wrote."""
        if not self._dirty:
            return False
        self.persist()
        return True

    def encode(self) -> str:
        """The file's content for the current table."""
        with self._lock:
            version = self._data_version.to_bean()
            snapshot = self._snapshot_locked()
        return self._encode(version, snapshot)

    def load(self) -> None:
        """Read the file (or its ``.bak``); neither present -> an empty table, counter 0."""
        loaded = load_with_backup(self.path, self._decode)
        with self._persist_lock, self._lock:
            if loaded is None:
                loaded = self._decode_table({}), DataVersion(timestamp_ms=self._clock.now_ms())
            self._table, self._data_version = loaded
            self._dirty = False
            self._changes += 1

    def install(self, text: str) -> None:
        """Replace the table by ``text``, the master's content of the file (a slave), and write
        it as ``persist`` does. Raises ValueError (nothing changes) if it does not decode."""
        table, version = self._decode(text)
        with self._persist_lock:
            with self._lock:
                self._table, self._data_version = table, version
                self._dirty = False
                self._changes += 1
            write_atomically(self.path, text)

    def _decode(self, text: str) -> tuple[Any, DataVersion]:
        document = json_object(loads(text), self.file_name)
        table = self._decode_table(document.get("offsetTable") or {})
        return table, DataVersion.from_json(document.get("dataVersion"), self._clock.now_ms())

    def _snapshot_locked(self) -> Any:
        raise NotImplementedError

    def _encode(self, version: Bean, snapshot: Any) -> str:
        raise NotImplementedError

    def _decode_table(self, raw: Any) -> Any:
        raise NotImplementedError


class ConsumerOffsetManager(_ProgressFile):
    """Committed consume offsets: ``topic@group`` -> queue id -> next offset to consume."""

    file_name = CONSUMER_OFFSET_FILE

    _table: dict[str, dict[int, int]]

    def __init__(
        self,
        config_dir: Path,
        clock: Clock,
        check_writable: Callable[[], None] = always_writable,
        lite: LiteConsumerOffsets | None = None,
    ) -> None:
        super().__init__(config_dir, clock, check_writable)
        # Lite topics' offsets (``%LMQ%$parent$lite``) go here instead when given (the store
        # gives it): services/store/lite/consumer_offsets.py says why.
        self.lite = lite

    def move_lite_offsets(self) -> None:
        """Move the lite topics' offsets of an older consumerOffset.json into ``lite`` (once both
        are loaded and open)."""
        lite = self.lite
        assert lite is not None
        with self._lock:
            moved = [key for key in self._table if key.startswith(LITE_TOPIC_PREFIX)]
            for key in moved:
                topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
                for offset in self._table.pop(key).values():
                    lite.commit(group, topic, offset)
            if moved:
                self._dirty = True
                self._changes += 1

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.lite is not None and topic.startswith(LITE_TOPIC_PREFIX):
            self.lite.commit(group, topic, offset)
            return
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                self._table[key] = {queue_id: offset}
            else:
                queues[queue_id] = offset
            self._dirty = True
            self._changes += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or -1 if the group never committed on this queue."""
        if self.lite is not None and topic.startswith(LITE_TOPIC_PREFIX):
            return self.lite.query(group, topic)
        with self._lock:
            queues = self._table.get(topic + TOPIC_GROUP_SEPARATOR + group)
            if queues is None:
                return -1
            return queues.get(queue_id, -1)

    def offsets_of_group(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, queue id) -> offset for every queue ``group`` committed on."""
        result: dict[tuple[str, int], int] = {}
        with self._lock:
            for key, queues in self._table.items():
                parts = key.split(TOPIC_GROUP_SEPARATOR)
                if len(parts) == 2 and parts[1] == group:
                    for queue_id, offset in queues.items():
                        result[(parts[0], queue_id)] = offset
        return result

    def offset_table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table, keyed ``topic@group``."""
        with self._lock:
            return self._snapshot_locked()

    def remove_group(self, group: str) -> int:
        """Drop every ``*@group`` entry; returns how many topics it had."""
        lite = self.lite.remove_group(group) if self.lite is not None else 0
        return self._remove(lambda parts: parts[1] == group) + lite

    def remove_topic(self, topic: str) -> int:
        """Drop every ``topic@*`` entry; returns how many groups had one."""
        return self.remove_topics([topic])

    def remove_topics(self, topics: Collection[str]) -> int:
        """:meth:`remove_topic` of each, in one pass over the table (expired lite topics)."""
        doomed = set(topics)
        lite = {t for t in doomed if t.startswith(LITE_TOPIC_PREFIX)} if self.lite is not None else set()
        removed = self.lite.remove_lmqs(lite) if self.lite is not None and lite else 0
        doomed -= lite
        return removed + (self._remove(lambda parts: parts[0] in doomed) if doomed else 0)

    def _remove(self, matches: Any) -> int:
        with self._lock:
            doomed = [
                key for key in self._table if len(parts := key.split(TOPIC_GROUP_SEPARATOR)) == 2 and matches(parts)
            ]
            for key in doomed:
                del self._table[key]
            if doomed:
                self._dirty = True
                self._changes += 1
        return len(doomed)

    def _snapshot_locked(self) -> dict[str, dict[int, int]]:
        return {key: dict(queues) for key, queues in self._table.items()}

    def _encode(self, version: Bean, snapshot: dict[str, dict[int, int]]) -> str:
        offset_table = hashmap_ordered(
            {key: {queue_id: queues[queue_id] for queue_id in sorted(queues)} for key, queues in snapshot.items()},
            OFFSET_TABLE_JAVA_CAPACITY,
        )
        group_topics: dict[str, list[str]] = {}
        for key in offset_table:
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2:
                group_topics.setdefault(parts[1], []).append(parts[0])
        group_topic_map = {
            group: tuple(java_hashmap_order(topics, GROUP_TOPIC_SET_JAVA_CAPACITY))
            for group, topics in hashmap_ordered(group_topics, GROUP_TOPIC_MAP_JAVA_CAPACITY).items()
        }
        return dumps(Bean(dataVersion=version, groupTopicMap=group_topic_map, offsetTable=offset_table))

    def _decode_table(self, raw: Any) -> dict[str, dict[int, int]]:
        return {
            json_str(key, "offsetTable key"): _int_table(queues, key)
            for key, queues in json_object(raw, "offsetTable").items()
        }


class DelayOffsetManager(_ProgressFile):
    """Delivery progress of ``SCHEDULE_TOPIC_XXXX``: delay level -> next ConsumeQueue offset."""

    file_name = DELAY_OFFSET_FILE

    _table: dict[int, int]

    def get(self, level: int) -> int:
        with self._lock:
            return self._table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        self.check_writable()
        with self._lock:
            self._table[level] = offset
            self._dirty = True
            self._changes += 1

    def offset_table(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    def _snapshot_locked(self) -> dict[int, int]:
        return dict(self._table)

    def _encode(self, version: Bean, snapshot: dict[int, int]) -> str:
        return dumps(Bean(dataVersion=version, offsetTable={level: snapshot[level] for level in sorted(snapshot)}))

    def _decode_table(self, raw: Any) -> dict[int, int]:
        return _int_table(raw, "offsetTable")
