"""The slave side of CommitLog replication: append the master's raw CommitLog bytes, and cut
the CommitLog back to a phy_offset (RocketMQ 5: ``CommitLog.appendData``,
``DefaultMessageStore.truncateFiles``).

Appending. Bytes go in only at exactly the CommitLog's max phy_offset, and only as *whole*
records (a blank record counts as running to its segment's end), each checked as recovery
checks it (``validate_record``: length arithmetic, its own PHYSICALOFFSET field, and with
``check_crc_on_recover`` the body CRC and, with ``append_prop_crc`` too, the whole-record CRC
trailer). Whole records, because then the replica's max phy_offset is always a record
boundary: reput dispatches up to it, the slave can report it as its confirmed offset, and a
crash never leaves a torn tail that recovery would cut below what was acknowledged to the
master. The master sends whole records anyway: it reads them from its own log up to a record
boundary. The same rules as recovery, so what an append accepts a restart keeps. Nothing is
written when any record of the chunk fails.

Truncating (RocketMQ truncates rather than rebuilds, and so do we: the cost follows the
length of the dropped tail, not the size of the store, and it is the very code recovery runs
after a torn tail): under the reput pause, the put lock, the flush lock, the checkpoint lock
and the dispatch lock (that order), drop the CommitLog bytes and files from the offset on and
zero the rest of the kept segment (stale records must never be mistaken for the master's
bytes, and the segment must end byte-identical to the master's), flush, cut every
ConsumeQueue and the IndexFile there, restart reput at or below the offset (re-dispatch is
idempotent), lower the checkpoint's offsets, recount the open transactions if they counted
past it, and dispatch up to the new end so the queue offset table is right again.
"""

from __future__ import annotations

import logging

from services.domain.format.commitlog_format import BLANK_RECORD_SIZE_BYTES, CorruptRecord, validate_record
from services.store.config import StoreConfig
from services.store.errors import ReplicaDataError, ReplicaOffsetError
from services.store.index.service import IndexService
from services.store.lite.index import LiteIndex
from services.store.log.checkpoint import CheckpointFile
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.log.reput import ReputService
from services.store.metadata.transaction_metrics import TransactionMetrics

log = logging.getLogger(__name__)


class ReplicaLog:
    """Slave-side writes to one store's CommitLog (the parts of a started FileStore)."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        cq_store: ConsumeQueueStore,
        index_service: IndexService | None,
        reput: ReputService,
        checkpoint: CheckpointFile,
        transactions: TransactionMetrics | None = None,
        lite: LiteIndex | None = None,
    ) -> None:
        self._config = config
        self._commitlog = commitlog
        self._cq_store = cq_store
        self._index_service = index_service
        self._reput = reput
        self._checkpoint = checkpoint
        self._transactions = transactions
        self._lite = lite

    @property
    def max_phy_offset(self) -> int:
        return self._commitlog.max_offset

    # -- append -------------------------------------------------------------------------------
    def check_records(self, phy_offset: int, data: bytes | memoryview) -> None:
        """Raise ReplicaDataError unless ``data`` holds whole valid records laid out from
        ``phy_offset`` as the CommitLog's segments lay them out."""
        file_size = self._config.commitlog_file_size_bytes
        check_crc = self._config.check_crc_on_recover
        require_prop_crc = self._config.append_prop_crc and check_crc
        with memoryview(data) as view:
            pos = 0
            while pos < len(view):
                offset = phy_offset + pos
                segment_left = file_size - offset % file_size
                limit = pos + min(segment_left, len(view) - pos)
                try:
                    size = validate_record(view, pos, limit, offset, check_crc, require_prop_crc)
                except CorruptRecord as exc:
                    raise ReplicaDataError(offset, exc.reason) from None
                if size == 0:
                    pos += segment_left  # blank: validated to run to the segment's end
                    continue
                if segment_left - size < BLANK_RECORD_SIZE_BYTES:
                    raise ReplicaDataError(offset, "the record leaves no room for a blank record in its segment")
                pos += size

    def append(self, phy_offset: int, data: bytes | memoryview) -> int:
        """Append the master's CommitLog bytes ``data``, which start at ``phy_offset``; returns
        the new max phy_offset. Raises ReplicaOffsetError unless ``phy_offset`` is the current
        max phy_offset, ReplicaDataError unless ``data`` is whole valid records (nothing is
        written then), OSError when a segment cannot be created or written (sticky, as for
        any append)."""
        if not data:
            return self._commitlog.max_offset
        self.check_records(phy_offset, data)
        commitlog = self._commitlog
        with commitlog.put_lock:
            expected = commitlog.max_offset
            if phy_offset != expected:
                raise ReplicaOffsetError(
                    f"replicated bytes offered at phy_offset {phy_offset}, the CommitLog ends at {expected}",
                    phy_offset,
                    expected,
                )
            with memoryview(data) as view:
                pos = 0
                while pos < len(view):
                    mf = commitlog.mfq.last_file_for_append()
                    mf.check_writable()
                    start = mf.wrote_position
                    assert mf.file_from_offset + start == phy_offset + pos, (mf.file_from_offset, start, pos)
                    count = min(len(view) - pos, mf.file_size - start)
                    if start + count > mf.populated_position:
                        mf.populate_ahead(start + count)
                    try:
                        mf.mm[start : start + count] = view[pos : pos + count]
                    except (OSError, ValueError, TypeError) as exc:
                        mf.write_error = exc if isinstance(exc, OSError) else OSError(str(exc))
                        raise mf.write_error  # noqa: B904 - the stored error is what every later write raises
                    mf.wrote_position = start + count
                    pos += count
            commitlog.put_bytes_total += len(data)
            end = commitlog.max_offset
        self._reput.notify_append()
        return end

    def start_at(self, phy_offset: int) -> None:
        """Make an empty CommitLog begin at ``phy_offset``, a segment start: the first segment
        the master still holds after its retention deleted older ones (RocketMQ's slave does the
        same when its CommitLog is empty and the master's min offset is beyond it). Reput and
        the checkpoint start there too; the ConsumeQueues begin at the first record's queue
        offset (``ConsumeQueue._file_for`` fills the slots before it with blank units). Raises
        ReplicaOffsetError unless the CommitLog is empty and ``phy_offset`` a segment start."""
        commitlog = self._commitlog
        reput = self._reput
        checkpoint = self._checkpoint
        with reput.paused(), commitlog.put_lock, commitlog.flush_lock, checkpoint.lock, reput.dispatch_lock:
            max_offset = commitlog.max_offset
            if max_offset != commitlog.min_offset or phy_offset % self._config.commitlog_file_size_bytes:
                raise ReplicaOffsetError(
                    f"cannot start the CommitLog [{commitlog.min_offset}, {max_offset}) at phy_offset {phy_offset}: "
                    "only an empty CommitLog starts anew, at a segment start",
                    phy_offset,
                    max_offset,
                )
            if phy_offset == max_offset:
                return
            log.warning("empty CommitLog starts at the master's min offset %d", phy_offset)
            for mf in commitlog.mfq.files:  # empty segments (nothing was ever written to them)
                mf.destroy()
            commitlog.mfq.files = []
            commitlog.mfq.create_file(phy_offset)
            commitlog.confirm_offset = phy_offset
            reput.reset_reput_from_offset(phy_offset)
            cp = checkpoint.current
            cp.flushed_phy_offset = max(cp.flushed_phy_offset, phy_offset)
            cp.dispatched_phy_offset = max(cp.dispatched_phy_offset, phy_offset)
            checkpoint.save()

    # -- truncate -----------------------------------------------------------------------------
    def is_record_boundary(self, phy_offset: int) -> bool:
        """True when a record (or a blank record, or nothing: the end) starts at ``phy_offset``
        (RocketMQ's isOffsetAligned), checked without CRC."""
        commitlog = self._commitlog
        if phy_offset == commitlog.max_offset:
            return True
        mf = commitlog.mfq.find_by_offset(phy_offset)
        if mf is None or phy_offset > commitlog.max_offset:
            return False
        pos = phy_offset - mf.file_from_offset
        try:
            with memoryview(mf.mm) as view:
                validate_record(view, pos, mf.wrote_position, phy_offset, check_crc=False)
        except CorruptRecord:
            return False
        return True

    def truncate(self, phy_offset: int) -> int:
        """Cut the CommitLog to ``phy_offset`` (a record boundary between its min and max
        offsets), then the ConsumeQueues, the IndexFile, reput and the checkpoint; returns where
        reput restarted. Raises ReplicaOffsetError for any other offset."""
        commitlog = self._commitlog
        reput = self._reput
        checkpoint = self._checkpoint
        with reput.paused(), commitlog.put_lock, commitlog.flush_lock, checkpoint.lock, reput.dispatch_lock:
            max_offset = commitlog.max_offset
            if not commitlog.min_offset <= phy_offset <= max_offset or not self.is_record_boundary(phy_offset):
                raise ReplicaOffsetError(
                    f"cannot truncate the CommitLog [{commitlog.min_offset}, {max_offset}) to phy_offset "
                    f"{phy_offset}: not a record boundary within it",
                    phy_offset,
                    max_offset,
                )
            if phy_offset < max_offset:
                log.warning("truncating the CommitLog from %d to %d", max_offset, phy_offset)
            commitlog.mfq.truncate_dirty_files(phy_offset)
            assert commitlog.max_offset == phy_offset, (commitlog.max_offset, phy_offset)
            kept = commitlog.mfq.find_by_offset(phy_offset)
            if kept is not None:
                kept.zero(phy_offset - kept.file_from_offset, kept.file_size)
                kept.flushed_position = 0  # the zeros must reach the disk too
            commitlog.mfq.flush(0)
            commitlog.dispatch_backlog.clear()  # requests for records that are gone
            commitlog.confirm_offset = min(commitlog.confirm_offset, phy_offset)
            self._cq_store.truncate_dirty(phy_offset)
            if self._lite is not None:
                self._lite.truncate(phy_offset)
            commitlog.lite_put_offsets.clear()
            reput_from = min(reput.reput_from_offset, phy_offset)
            if self._index_service is not None:
                files_before = len(self._index_service.files)
                max_indexed = self._index_service.truncate(phy_offset)
                if len(self._index_service.files) < files_before:
                    reput_from = min(reput_from, max_indexed if max_indexed >= 0 else commitlog.min_offset)
            reput_from = max(reput_from, commitlog.min_offset)
            reput.reset_reput_from_offset(reput_from)
            cp = checkpoint.current
            cp.flushed_phy_offset = min(cp.flushed_phy_offset, phy_offset)
            cp.dispatched_phy_offset = min(cp.dispatched_phy_offset, reput_from)
            cp.cq_max_offset_sum = min(cp.cq_max_offset_sum, self._cq_store.max_offset_sum())
            checkpoint.save()
        with reput.paused():
            transactions = self._transactions
            if transactions is not None and transactions.valid_to > reput_from:
                counted_to = transactions.load(commitlog.min_offset, reput_from)
                reput.redispatch(counted_to, [transactions], until=reput_from)
            self.refresh_queue_offset_table()
        return reput_from

    def refresh_queue_offset_table(self) -> None:
        """Dispatch everything appended, then take each queue's next queue offset from its
        ConsumeQueue (appends do not maintain the table; a replica about to write as master
        calls this first, as RocketMQ's recoverTopicQueueTable on becoming master)."""
        with self._reput.paused():
            self._reput.run_once()
            with self._commitlog.put_lock:
                self._commitlog.queue_offset_table = self._cq_store.queue_offset_table()
                self._commitlog.lite_put_offsets.clear()  # the lite index is fully dispatched: the truth
