"""EpochCache: a replica's epoch history, as RocketMQ 5's ``EpochFileCache`` keeps it (no I/O:
``services/store/ha/epoch_file.py`` persists it as ``epochFileCheckpoint``).

Each master term (epoch) appends one EpochEntry: the phy_offset its first record went to.
Entry ``i`` covers [startOffset_i, startOffset_{i+1}); the last one ends at the CommitLog's
max phy_offset, which the caller passes in (the cache never sees the CommitLog).

Invariants: epochs strictly grow; start offsets never go back (two terms in a row without a
write start at the same offset: the first is then empty. RocketMQ's appendEntry refuses that
second term, leaving the replica unable to record it; pyrmq keeps it).

A reconnecting slave truncates to ``find_consistent_point(master entries)``: the end of the
newest epoch both sides have with the same start offset, cut at the shorter of the two ends.
Everything after it the master never had (or had under another epoch), so it must go.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.domain.format.epoch_file_format import END_OFFSET_UNKNOWN, EpochEntry, EpochFileError, check_order

__all__ = ["EpochCache", "EpochEntry", "EpochFileError"]


class EpochCache:
    """The ordered (epoch, startOffset) pairs of one replica. Not thread-safe: the owner locks."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        starts = [EpochEntry(e.epoch, e.start_offset) for e in entries]
        check_order(starts)
        self._starts = starts

    def __len__(self) -> int:
        return len(self._starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochCache) and self._starts == other._starts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"EpochCache({[(e.epoch, e.start_offset) for e in self._starts]})"

    # -- reading ----------------------------------------------------------------------------
    @property
    def last_epoch(self) -> int:
        """The newest epoch, or -1 when there is none (RocketMQ's lastEpoch)."""
        return self._starts[-1].epoch if self._starts else -1

    def first_entry(self) -> EpochEntry | None:
        return self._starts[0] if self._starts else None

    def last_entry(self, max_offset: int = END_OFFSET_UNKNOWN) -> EpochEntry | None:
        """The newest entry, ending at ``max_offset`` (the CommitLog's max phy_offset)."""
        entries = self.entries(max_offset)
        return entries[-1] if entries else None

    def entries(self, max_offset: int = END_OFFSET_UNKNOWN) -> list[EpochEntry]:
        """Every entry, oldest first, with endOffset derived: the next entry's start, and
        ``max_offset`` for the last one (never below its own start)."""
        starts = self._starts
        out = []
        for i, entry in enumerate(starts):
            end = starts[i + 1].start_offset if i + 1 < len(starts) else max(max_offset, entry.start_offset)
            out.append(EpochEntry(entry.epoch, entry.start_offset, end))
        return out

    def get_entry(self, epoch: int, max_offset: int = END_OFFSET_UNKNOWN) -> EpochEntry | None:
        for entry in self.entries(max_offset):
            if entry.epoch == epoch:
                return entry
        return None

    def find_epoch_entry_by_offset(self, offset: int, max_offset: int) -> EpochEntry | None:
        """The entry whose [startOffset, endOffset) holds ``offset``, or None."""
        for entry in self.entries(max_offset):
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        return None

    def find_consistent_point(self, remote_entries: Sequence[EpochEntry], max_offset: int) -> int:
        """The phy_offset up to which this history (its last entry ending at ``max_offset``)
        agrees with ``remote_entries`` (the master's, with its end offsets: the last one at
        the master's max phy_offset), or -1 when they share no epoch at all.

        From the newest local epoch down, the first epoch the remote also has *with the same
        startOffset* decides: min(local endOffset, remote endOffset) (RocketMQ's
        findConsistentPoint). An epoch the remote never had, or had from another offset, is
        skipped.
        """
        remote = {entry.epoch: entry for entry in remote_entries}
        for local in reversed(self.entries(max_offset)):
            other = remote.get(local.epoch)
            if other is not None and other.start_offset == local.start_offset:
                return min(local.end_offset, other.end_offset)
        return -1

    # -- changing -------------------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> EpochEntry:
        """Record that ``epoch`` writes from ``start_offset`` on. Raises EpochFileError unless
        the epoch is newer than the last and the offset is not before the last start."""
        entry = EpochEntry(epoch, start_offset)
        if self._starts:
            last = self._starts[-1]
            if epoch <= last.epoch:
                raise EpochFileError(f"epoch {epoch} is not newer than the last epoch {last.epoch}")
            if start_offset < last.start_offset:
                raise EpochFileError(
                    f"epoch {epoch} would start at {start_offset}, before epoch {last.epoch} ({last.start_offset})"
                )
        self._starts.append(entry)
        return entry

    def truncate_suffix_by_offset(self, offset: int) -> list[EpochEntry]:
        """Forget every epoch that starts at or after ``offset`` (the CommitLog is cut there);
        returns what was removed."""
        keep = sum(1 for entry in self._starts if entry.start_offset < offset)
        removed, self._starts = self._starts[keep:], self._starts[:keep]
        return removed

    def truncate_prefix_by_offset(self, offset: int) -> list[EpochEntry]:
        """Forget the epochs that end at or before ``offset`` (retention deleted the CommitLog
        below it), and move the first kept epoch's start up to ``offset``. The last epoch is
        never dropped (its end is still open). Returns what was removed."""
        starts = self._starts
        drop = 0
        while drop + 1 < len(starts) and starts[drop + 1].start_offset <= offset:
            drop += 1
        removed, kept = starts[:drop], starts[drop:]
        if kept and kept[0].start_offset < offset:
            kept[0] = EpochEntry(kept[0].epoch, offset)
        self._starts = kept
        return removed
