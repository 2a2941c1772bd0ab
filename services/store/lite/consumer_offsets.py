"""Consumer offsets in lite topics (issue 18), in one LMDB environment
(``<store root>/config/liteOffsets``; byte layout: services/domain/format/lite_offsets_format.py).

Why not consumerOffset.json: a group on a million lite topics would make it a million entries,
re-encoded in full every 5 s (measured: 200,000 entries take 7 s to write, 5 s to load and
350 MB of memory). Here a commit is one small LMDB write, a read one lookup, nothing per lite
topic lives in Python objects, and opening costs nothing. Unlike the lite index this is not a
cache: the offsets are the groups' progress, as consumerOffset.json is (LMDB keeps the file
consistent through a crash; ``flush`` syncs it on the same schedule as the JSON file).

Replicated through the pop journal (issue 30; consumerOffset.json goes by config sync): every
offset the pop engine moves is recorded in the CommitLog (services/store/pop/journal.py), and a
replica that is not the master writes what the journal says here as its reput reads it
(``commit_max``: never back, but for a reset), so a failover carries a lite group's offsets over.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from pathlib import Path

import lmdb

from services.domain.format import lite_offsets_format as fmt
from services.domain.lite import LITE_SEPARATOR, LITE_TOPIC_PREFIX, split_lmq_name

DIRECTORY = "liteOffsets"


class LiteConsumerOffsets:
    def __init__(self, config_dir: Path, map_size_bytes: int) -> None:
        self._directory = config_dir / DIRECTORY
        self._map_size_bytes = map_size_bytes
        self._env: lmdb.Environment | None = None
        self._lock = threading.Lock()  # one writer at a time (LMDB allows one write transaction)
        self._groups: set[str] = set()  # groups with an offset here (for removing a lite topic)

    def open(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(self._directory), map_size=self._map_size_bytes, max_dbs=2, sync=False)
        self._offsets = self._env.open_db(b"offsets")
        self._groups = set(self._scan_groups())

    def close(self) -> None:
        if self._env is not None:
            self._env.sync(True)
            self._env.close()
            self._env = None

    def flush(self) -> None:
        if self._env is not None:
            self._env.sync(True)

    @property
    def env(self) -> lmdb.Environment:
        assert self._env is not None, "LiteConsumerOffsets.open() first"
        return self._env

    # -- what ConsumerOffsetManager routes here ----------------------------------------------
    def commit(self, group: str, lmq: str, offset: int) -> None:
        with self._lock, self.env.begin(write=True, db=self._offsets) as txn:
            txn.put(fmt.offset_key(group, lmq), fmt.pack_offset(offset))
            self._groups.add(group)

    def commit_max(self, group: str, lmq: str, offset: int) -> None:
        """``commit`` unless the stored offset is already at or past ``offset`` (a replica
        following the pop journal: services/store/pop/journal.py ``LiteOffsetFollower``)."""
        key = fmt.offset_key(group, lmq)
        with self._lock, self.env.begin(write=True, db=self._offsets) as txn:
            raw = txn.get(key)
            if raw is None or fmt.unpack_offset(raw) < offset:
                txn.put(key, fmt.pack_offset(offset))
                self._groups.add(group)

    def query(self, group: str, lmq: str) -> int:
        """The group's next offset in the lite topic, -1 if it never committed one."""
        with self.env.begin(db=self._offsets) as txn:
            raw = txn.get(fmt.offset_key(group, lmq))
        return fmt.unpack_offset(raw) if raw is not None else -1

    def remove_group(self, group: str) -> int:
        prefix = fmt.group_prefix(group)
        removed = 0
        with self._lock, self.env.begin(write=True, db=self._offsets) as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):
                    removed += 1
                    if not cursor.delete():
                        break
            self._groups.discard(group)
        return removed

    def remove_lmqs(self, lmqs: Collection[str]) -> int:
        """Every group's offset in these lite topics (expired): one delete per (group, lite topic)."""
        removed = 0
        with self._lock, self.env.begin(write=True, db=self._offsets) as txn:
            for group in self._groups:
                for lmq in lmqs:
                    removed += bool(txn.delete(fmt.offset_key(group, lmq)))
        return removed

    def lags(self, lmq: str, max_offset: int) -> bool:
        """Whether a group with an offset in the lite topic has not read it to ``max_offset``."""
        with self.env.begin(db=self._offsets) as txn:
            for group in self._groups:
                raw = txn.get(fmt.offset_key(group, lmq))
                if raw is not None and fmt.unpack_offset(raw) < max_offset:
                    return True
        return False

    def parents_of_group(self, group: str) -> list[str]:
        """The LITE parents the group has lite topic offsets under (a seek per parent, not a walk)."""
        prefix = fmt.group_prefix(group) + LITE_TOPIC_PREFIX.encode("utf-8")
        parents = []
        with self.env.begin(db=self._offsets) as txn:
            cursor = txn.cursor()
            position = prefix
            while cursor.set_range(position) and cursor.key().startswith(prefix):
                lite = split_lmq_name(fmt.split_key(cursor.key())[1])
                if lite is None:
                    break
                parents.append(lite[0])
                # past every lite topic of this parent: "$" + 1 is "%"
                position = prefix + lite[0].encode("utf-8") + chr(ord(LITE_SEPARATOR) + 1).encode("ascii")
        return parents

    def _scan_groups(self) -> Iterator[str]:
        """Each group with an offset (a seek per group)."""
        with self.env.begin(db=self._offsets) as txn:
            cursor = txn.cursor()
            position = b""
            while cursor.set_range(position):
                group, _ = fmt.split_key(cursor.key())
                yield group
                position = fmt.group_prefix(group)[:-1] + b"\x01"  # past "<group>\x00..."
