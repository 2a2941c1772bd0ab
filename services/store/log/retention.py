"""Retention: delete old CommitLog segments, then the ConsumeQueue and IndexFile files that
only pointed into them.

A segment (never the last one) is deleted when its last write is older than
``file_reserved_time_hours``, or regardless of age when disk use passes
``disk_space_clean_forcibly_ratio``. Deletion goes oldest first and stops at the first kept
file, so the log never has holes. Above ``disk_space_warning_level_ratio`` the store refuses
writes (``disk_full``) until space is back.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from services.runtime.clock import Clock
from services.store.config import StoreConfig
from services.store.index.service import IndexService
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.log.flush import _Loop

log = logging.getLogger(__name__)


class CleanService(_Loop):
    name = "clean"

    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        commitlog: CommitLog,
        cq_store: ConsumeQueueStore,
        index_service: IndexService | None,
        dispatch_lock: threading.Lock,
        disk_usage: Callable[[], float],
    ) -> None:
        super().__init__(config.clean_resource_interval_ms / 1000)
        self.config = config
        self.clock = clock
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.dispatch_lock = dispatch_lock
        self.disk_usage = disk_usage
        self.disk_full = False
        self.deleted_files_total = 0

    def refresh_disk_full(self) -> bool:
        """Whether the disk is past the mark where puts are refused, judged now (between passes
        too: a replica publishes it to its group every few hundred ms, for elections)."""
        self._check_disk()
        return self.disk_full

    def _check_disk(self) -> float:
        usage = self.disk_usage()
        was_full = self.disk_full
        self.disk_full = usage > self.config.disk_space_warning_level_ratio
        if self.disk_full != was_full:
            log.warning("disk use %.0f%%: writes %s", usage * 100, "refused" if self.disk_full else "allowed again")
        return usage

    def run_once(self) -> int:
        """One retention pass; returns the number of CommitLog segments deleted."""
        config = self.config
        usage = self._check_disk()
        clean_immediately = usage > config.disk_space_clean_forcibly_ratio
        now_ms = self.clock.now_ms()
        reserved_ms = config.file_reserved_time_hours * 3_600_000
        count = 0
        for mf in self.commitlog.mfq.files[:-1]:
            if count >= config.delete_file_batch_max:
                break
            try:
                modified_ms = os.stat(mf.path).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                modified_ms = 0
            if now_ms >= modified_ms + reserved_ms or clean_immediately:
                count += 1
            else:
                break
        if count:
            with self.commitlog.put_lock:
                doomed = self.commitlog.mfq.delete_first_files(count)
            log.info("deleted %d CommitLog segment(s): %s", len(doomed), ", ".join(m.path.name for m in doomed))
            self.deleted_files_total += len(doomed)
        min_offset = self.commitlog.min_offset
        with self.dispatch_lock:
            self.cq_store.delete_expired(min_offset)
        if self.index_service is not None:
            self.index_service.delete_expired_files(min_offset)
        return count
