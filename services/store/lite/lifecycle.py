"""Expiry of idle lite topics (RocketMQ's ``LiteLifecycleManager``).

A LITE parent's ``lite.topic.expiration`` (minutes; -1, the default: never) is how long one of
its lite topics may go without a new message: past it, the lite topic is removed with its units
and its consumer groups' offsets, as if it had never been sent to, and a later message creates it
anew from offset 0. As in RocketMQ, the expiration is never shorter than 15 minutes
(``minLiteTTl``) and nothing expires in the first 15 minutes after the store starts (a lite topic's
last store time may be older than a long stop). Unlike RocketMQ (whose check is a stub that always
says no), a lite topic a consumer group still lags on is kept until the group has read it (a
group with an offset below its end: ``lags``); a group that never consumed it does not hold it.
The messages stay in the CommitLog until retention removes them; the parent's queues still hold
them.

``run_once()`` walks each LITE parent's lite topics in name order (a range of the index, nothing
kept in memory per lite topic) and is run every ``lite_expiry_interval_ms`` (120 s).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from services.domain.lite import LITE_EXPIRATION_NEVER, lite_expiration_minutes, lmq_name
from services.runtime.clock import Clock
from services.store.lite.index import LiteIndex
from services.store.log.commitlog import CommitLog
from services.store.metadata.topic_config import TopicConfigManager

log = logging.getLogger(__name__)

LITE_EXPIRATION_FLOOR_MS = 15 * 60_000
START_GRACE_MS = 15 * 60_000


class LiteLifecycle:
    name = "lite-expiry"

    def __init__(
        self,
        index: LiteIndex,
        topics: TopicConfigManager,
        remove_offsets: Callable[[list[str]], int],
        clock: Clock,
        commitlog: CommitLog,
        lags: Callable[[str, int], bool] = lambda lmq, max_offset: False,
    ) -> None:
        self._commitlog = commitlog
        self._lags = lags
        self._index = index
        self._topics = topics
        self._remove_offsets = remove_offsets
        self._clock = clock
        self._started_ms = clock.now_ms()
        self.removed_total = 0

    def run_once(self) -> int:
        """Remove the lite topics idle past their parent's expiration; returns how many."""
        now = self._clock.now_ms()
        if now - self._started_ms < START_GRACE_MS:
            return 0
        removed = 0
        for parent in self._topics.list():
            if parent.message_type != "LITE":
                continue
            minutes = lite_expiration_minutes(parent.attributes)
            if minutes == LITE_EXPIRATION_NEVER:
                continue
            idle_max_ms = max(minutes * 60_000, LITE_EXPIRATION_FLOOR_MS)
            prefix = lmq_name(parent.topic_name, "")
            idle = [q.lmq for q in self._index.iter_queues(prefix) if now - q.last_store_timestamp_ms > idle_max_ms]
            expired = [lmq for lmq in idle if self._remove_if_idle(lmq, now - idle_max_ms)]
            self._remove_offsets(expired)  # one pass over the offsets table for the whole sweep
            if expired:
                log.info("removed %d lite topics of %s idle for over %d min", len(expired), parent.topic_name, minutes)
            removed += len(expired)
        self.removed_total += removed
        return removed

    def _remove_if_idle(self, lmq: str, idle_since_ms: int) -> bool:
        """Remove ``lmq`` unless a message came meanwhile: under the put lock no message is
        appended, and one appended but not yet indexed still holds its entry in the put path's
        offset table."""
        commitlog = self._commitlog
        with commitlog.put_lock:
            offsets = commitlog.lite_put_offsets
            if offsets.pending(lmq):
                return False
            queue = self._index.queue(lmq)
            if queue is None or queue.last_store_timestamp_ms >= idle_since_ms or self._lags(lmq, queue.max_offset):
                return False
            self._index.remove(lmq)
            offsets.forget(lmq)
        return True
