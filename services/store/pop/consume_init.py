"""Where a consumer group new to a queue starts: RocketMQ 5's ``PopMessageProcessor.getInitOffset``.

A group without a committed offset in a queue (it never consumed from it, or its offset was
removed with its topic or group) starts, under ``StoreConfig.consume_init_mode``:

* ``MIN``: at the queue's min offset, the oldest message retention left.
* ``MAX`` (the default; RocketMQ's gRPC proxy pops with it for every ReceiveMessage): at the
  queue's last message, ``max offset - 1`` (0 for an empty queue). RocketMQ's comment is "pop
  last one, then commit offset": a new group on a topic with a week of history receives the
  newest message of each queue, not the week. Unless ``init_pop_offset_by_check_msg_in_mem`` is
  on (the default), the queue still starts at offset 0 (retention removed nothing) and its first
  message is still *in memory*: then at 0, so a group that starts on a fresh topic receives what
  was sent before its first receive.

Retry topics (``%RETRY%{group}_{topic}``) always start at their min offset, whatever the mode.

"In memory": RocketMQ asks the page cache whether the first message's bytes are resident
(``checkInMemByConsumeOffset``, mincore). pyrmq does not account the page cache; it uses
RocketMQ's own estimate of the same thing (``estimateInMemByCommitOffset``, which decides how
pulls are batched): the message lies within the newest ``access_message_in_memory_max_ratio``
(40 %) of physical memory of the CommitLog, ``max_phy_offset - phy_offset <= ratio * physical
memory``. On a 16 GiB machine a queue whose first message is among the last 6.4 GiB written
counts as fresh. Ratio 0: never in memory (MAX always starts at the last message).

The pop engine commits the offset chosen here at once (RocketMQ's ``init = true``), so the
group's progress, lag and GetOffset see it from its first receive on.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from services.domain.names import RETRY_TOPIC_PREFIX
from services.store.config import ConsumeInitMode, StoreConfig
from services.store.log.commitlog import CommitLog
from services.store.store_read import ReadableQueue


def physical_memory_bytes() -> int:
    """The machine's physical memory (RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class ConsumeInitOffsets:
    """``init_offset(topic, queue_id)`` for the pop engine, over the CommitLog and ConsumeQueues."""

    def __init__(
        self, config: StoreConfig, commitlog: CommitLog, find_queue: Callable[[str, int], ReadableQueue | None]
    ) -> None:
        self._mode = config.consume_init_mode
        self._check_msg_in_mem = config.init_pop_offset_by_check_msg_in_mem
        self._in_memory_max_bytes = int(physical_memory_bytes() * config.access_message_in_memory_max_ratio)
        self._commitlog = commitlog
        self._find = find_queue  # (topic, queue_id) -> a ConsumeQueue or a lite topic's view, None if empty

    @property
    def in_memory_max_bytes(self) -> int:
        """How far behind the CommitLog's end a message still counts as in memory."""
        return self._in_memory_max_bytes

    def init_offset(self, topic: str, queue_id: int) -> int:
        """The offset a group new to the queue starts at (and commits)."""
        cq = self._find(topic, queue_id)
        min_offset, max_offset = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
        if self._mode is ConsumeInitMode.MIN or topic.startswith(RETRY_TOPIC_PREFIX):
            return min_offset
        if self._check_msg_in_mem and min_offset <= 0 and self.in_memory(topic, queue_id, 0):
            return 0
        return max(max_offset - 1, 0)

    def in_memory(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` counts as in memory (False if there is none)."""
        cq = self._find(topic, queue_id)
        unit = cq.get_unit(queue_offset) if cq is not None else None
        if unit is None:
            return False
        return self._commitlog.max_offset - unit[0] <= self._in_memory_max_bytes
