"""The next offset of each lite topic for the put path (under the CommitLog's put lock).

A lite message's LMQ offset is given when it is appended and written into the record
(``INNER_MULTI_QUEUE_OFFSET``), as RocketMQ's ``MultiDispatch`` does, so the lite index can be
rebuilt from the CommitLog with the same offsets. The offsets come from the lite index
(``max_offset``) for a lite topic seen the first time, and from ``_hot`` while it has appended
messages dispatch has not indexed yet. An entry whose last append is indexed is only a copy of
the index's, so entries are dropped once the table is full and dispatch has passed them: the
table holds the lite topics being written to right now, never all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

HOT_ENTRIES_MAX = 65_536


class LiteOffsetTable:
    def __init__(
        self, max_offset: Callable[[str], int], dispatched: Callable[[], int], hot_max: int = HOT_ENTRIES_MAX
    ) -> None:
        self._max_offset = max_offset
        self._dispatched = dispatched
        self._hot_max = hot_max
        self._drop_at = hot_max  # the size that triggers the next pass (amortized: see _drop_indexed)
        self._hot: dict[str, list[int]] = {}  # lmq -> [next offset, CommitLog end of its last append]
        # lite topics started (offset 0) by an append dispatch has not indexed: lmq -> its end
        self._new: dict[str, int] = {}
        self._new_lock = threading.Lock()  # new_pending runs outside the put lock

    def next_offset(self, lmq: str) -> int:
        """The offset the next message of ``lmq`` takes (``appended`` records it)."""
        entry = self._hot.get(lmq)
        return entry[0] if entry is not None else self._max_offset(lmq)

    def appended(self, lmq: str, offset: int, end: int) -> None:
        """A message of ``lmq`` took ``offset``; its record ends at CommitLog offset ``end``."""
        entry = self._hot.get(lmq)
        if offset == 0:
            with self._new_lock:
                self._new[lmq] = end
        if entry is None:
            if len(self._hot) >= self._drop_at:
                self._drop_indexed()
            self._hot[lmq] = [offset + 1, end]
        else:
            entry[0] = offset + 1
            entry[1] = end

    def _drop_indexed(self) -> None:
        """Keep the entries dispatch has not passed. The next pass waits until the table has
        grown by half its size again (at least ``hot_max``), so while dispatch lags behind a burst
        of new lite topics the passes stay rare: each costs O(entries), amortized O(1) a put."""
        dispatched = self._dispatched()
        self._hot = {lmq: entry for lmq, entry in self._hot.items() if entry[1] > dispatched}
        self._drop_at = max(self._hot_max, len(self._hot) + len(self._hot) // 2)

    def dispatched(self) -> int:
        """The CommitLog offset the lite index covers (it advances after the index's commit)."""
        return self._dispatched()

    def new_pending(self, dispatched: int) -> int:
        """Lite topics started by appends past ``dispatched`` (not indexed when it was read).
        A caller adding this to the index's count reads ``dispatched`` *before* the count: the
        index commits a batch before ``dispatched`` moves past it, so a lite topic dispatched in
        between is counted twice (a quota refuses one place early, in that instant), never missed."""
        with self._new_lock:
            if self._new:
                self._new = {lmq: end for lmq, end in self._new.items() if end > dispatched}
            return len(self._new)

    def forget(self, lmq: str) -> None:
        """Drop ``lmq``'s entry (its lite topic was removed: a next message starts it at 0)."""
        self._hot.pop(lmq, None)

    def pending(self, lmq: str) -> bool:
        """Whether a message of ``lmq`` was appended that dispatch has not indexed yet."""
        entry = self._hot.get(lmq)
        return entry is not None and entry[1] > self._dispatched()

    def clear(self) -> None:
        """Forget every entry (after a truncation, or before writing as a new master: the index,
        fully dispatched, is then the truth)."""
        self._hot.clear()
        with self._new_lock:
            self._new.clear()

    def __len__(self) -> int:
        return len(self._hot)
