"""The replica's ``epochFileCheckpoint`` (``<store root>/epochFileCheckpoint``, RocketMQ 5's name
and place: ``StorePathConfigHelper.getEpochFilePath``): its EpochCache, persisted on every change.

Every change rewrites the whole file atomically (temp file, fsync, rename, directory fsync:
``metadata.write_atomically``, which keeps the previous version as ``.bak``), before the
change is visible to readers: an epoch the file does not hold was never announced. The file is
a few lines long, so rewriting it is cheaper than any in-place scheme.

A missing file (and ``.bak``) is an empty history; a file that does not decode falls back to
its ``.bak``, and with neither usable the store refuses to go on (MetadataFileError): a replica
that forgot its epochs could not tell which of its bytes the master never had.
"""

from __future__ import annotations

import threading
from pathlib import Path

from services.domain.epoch_cache import EpochCache
from services.domain.format.epoch_file_format import EpochEntry, decode_epoch_file, encode_epoch_file
from services.store.metadata.config_files import load_with_backup, write_atomically

EPOCH_FILE_NAME = "epochFileCheckpoint"


class EpochFile:
    """Owns ``epochFileCheckpoint``: loads it once, rewrites it on each change (thread-safe)."""

    def __init__(self, store_root: Path) -> None:
        self.path = Path(store_root) / EPOCH_FILE_NAME
        self._lock = threading.Lock()
        self._cache = EpochCache()

    def load(self) -> EpochCache:
        """Read the file (missing: empty). Raises MetadataFileError when it and its ``.bak``
        both have content and neither decodes."""
        entries = load_with_backup(self.path, decode_epoch_file)
        with self._lock:
            self._cache = EpochCache(entries or ())
            return EpochCache(self._cache.entries())

    # -- reading (copies: the caller never holds the live cache) -------------------------------
    @property
    def last_epoch(self) -> int:
        with self._lock:
            return self._cache.last_epoch

    def entries(self, max_offset: int) -> list[EpochEntry]:
        with self._lock:
            return self._cache.entries(max_offset)

    def find_consistent_point(self, remote_entries: list[EpochEntry], max_offset: int) -> int:
        with self._lock:
            return self._cache.find_consistent_point(remote_entries, max_offset)

    # -- changing: the file first, then the cache ------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> EpochEntry:
        """Record a new term (EpochFileError if it does not follow the last one)."""
        with self._lock:
            candidate = EpochCache(self._cache.entries())
            entry = candidate.append(epoch, start_offset)
            self._write_locked(candidate)
            return entry

    def truncate_suffix_by_offset(self, offset: int) -> list[EpochEntry]:
        with self._lock:
            candidate = EpochCache(self._cache.entries())
            removed = candidate.truncate_suffix_by_offset(offset)
            if removed:
                self._write_locked(candidate)
            return removed

    def truncate_prefix_by_offset(self, offset: int) -> list[EpochEntry]:
        with self._lock:
            candidate = EpochCache(self._cache.entries())
            before = candidate.entries()
            removed = candidate.truncate_prefix_by_offset(offset)
            if candidate.entries() != before:
                self._write_locked(candidate)
            return removed

    def _write_locked(self, candidate: EpochCache) -> None:
        write_atomically(self.path, encode_epoch_file(candidate.entries()))
        self._cache = candidate
