"""Start-up recovery: find the end of valid CommitLog data and make the caches agree with it.

1. ConsumeQueues are recovered on their own (truncated after their last valid unit).
2. The CommitLog is validated record by record (CRC, length arithmetic, and the record's own
   phy_offset field) from ``scan_from = min(dispatched, flushed)`` of the checkpoint's pyrmq
   block (or, without a valid block, from the ConsumeQueues' max phy offset after a clean
   stop and from the first segment after a crash).
3. At the first record that fails, look for any valid record after it:
   - none: a torn tail (or the clean end): truncate there;
   - some, and the failure lies beyond the flushed offset: an unflushed tail written back
     out of order by a power loss: truncate there and zero what follows (ASYNC's promise);
   - some, below the flushed offset: damaged durable data. Refuse to start with an error
     naming the offsets, unless ``allow_truncate_corrupt`` is set.
4. ConsumeQueues and the IndexFile are truncated to the new end; reput restarts at
   ``min(dispatched, end)`` and re-dispatches the rest (dispatch is idempotent).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

from services.domain.format.checkpoint_format import Checkpoint
from services.domain.format.commitlog_format import (
    MAGIC_V1_BYTES,
    MAGIC_V2_BYTES,
    CorruptRecord,
    validate_record,
)
from services.store.config import StoreConfig
from services.store.errors import CommitLogCorruptError
from services.store.index.service import IndexService
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryResult:
    process_offset: int  # end of valid CommitLog data
    reput_from_offset: int  # where dispatch restarts
    scanned_bytes: int
    truncated_tail: bool  # bytes after the end were dropped
    confirm_offset: int  # start of the last valid record


def scan_start(commitlog: CommitLog, cq_store: ConsumeQueueStore, cp: Checkpoint, abnormal: bool) -> tuple[int, int]:
    """(scan_from, dispatch_from), both record boundaries within the CommitLog."""
    lo, hi = commitlog.min_offset, commitlog.mfq.files[-1].file_end_offset
    if cp.dispatched_phy_offset >= 0 and cp.flushed_phy_offset >= 0:
        dispatch_from = cp.dispatched_phy_offset
        scan_from = min(cp.dispatched_phy_offset, cp.flushed_phy_offset)
    elif abnormal:
        dispatch_from = scan_from = lo
    else:
        dispatch_from = scan_from = max(cq_store.max_physic_offset(), lo)
    clamp = lambda v: min(max(v, lo), hi)  # noqa: E731
    return clamp(scan_from), clamp(dispatch_from)


def find_valid_record_after(commitlog: CommitLog, offset: int, check_crc: bool, require_prop_crc: bool = False) -> int:
    """phy_offset of the first valid record after ``offset``, or -1. Only the file's data regions
    are searched (``data_regions``): the unused rest of a segment is a hole or an unwritten
    extent, zeros that hold no record, and reading it through the mapping would fault in every
    page of it (seconds for a 1 GiB segment, at every start-up)."""
    for mf in commitlog.mfq.files:
        if mf.file_end_offset <= offset:
            continue
        start = max(offset + 1 - mf.file_from_offset, 0)
        with memoryview(mf.mm) as view:
            for region_start, region_end in data_regions(mf.fd, start, mf.file_size):
                for magic in _candidates(mf.mm, region_start, region_end):
                    pos = magic - 4
                    try:
                        if (
                            validate_record(
                                view, pos, mf.file_size, mf.file_from_offset + pos, check_crc, require_prop_crc
                            )
                            > 0
                        ):
                            return mf.file_from_offset + pos
                    except CorruptRecord:
                        continue
    return -1


def data_regions(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The [start, end) ranges of the file that may hold data (``SEEK_DATA`` / ``SEEK_HOLE``;
    the whole range where the file system cannot tell)."""
    if fd < 0:
        return [(start, end)]
    regions = []
    pos = start
    try:
        while pos < end:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data from here to the end of the file
                    break
                raise
            if data >= end:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            regions.append((data, min(hole, end)))
            pos = hole
    except OSError:  # SEEK_DATA unsupported: search everything
        return [(start, end)]
    return regions


def _candidates(mm: mmap.mmap, start: int, end: int) -> Iterator[int]:
    """Positions of either magic at or after ``start + 4`` and before ``end + 4`` (a record that
    starts in the region), ascending."""
    p = start + 4
    stop = min(end + 4, len(mm))
    while True:
        a = mm.find(MAGIC_V1_BYTES, p, stop)
        b = mm.find(MAGIC_V2_BYTES, p, stop)
        hits = [h for h in (a, b) if h >= 0]
        if not hits:
            return
        h = min(hits)
        yield h
        p = h + 1


def scan_commitlog(
    commitlog: CommitLog, start: int, check_crc: bool, require_prop_crc: bool = False
) -> tuple[int, int, CorruptRecord | None]:
    """Validate from ``start``; returns (end of valid data, start of last valid record, failure)."""
    offset = start
    last_valid = -1
    file_size = commitlog.config.commitlog_file_size_bytes
    for mf in commitlog.mfq.files:
        if mf.file_end_offset <= offset:
            continue
        pos = offset - mf.file_from_offset
        with memoryview(mf.mm) as view:
            while pos < file_size:
                try:
                    size = validate_record(view, pos, file_size, mf.file_from_offset + pos, check_crc, require_prop_crc)
                except CorruptRecord as exc:
                    return mf.file_from_offset + pos, last_valid, exc
                if size == 0:  # blank: the rest of this segment is unused
                    pos = file_size
                    break
                last_valid = mf.file_from_offset + pos
                pos += size
        offset = mf.file_end_offset
    return offset, last_valid, None


def recover(
    config: StoreConfig,
    commitlog: CommitLog,
    cq_store: ConsumeQueueStore,
    index_service: IndexService | None,
    cp: Checkpoint,
    abnormal: bool,
) -> RecoveryResult:
    files = commitlog.mfq.files
    if not files:
        cq_store.truncate_dirty(0)
        if index_service is not None:
            index_service.truncate(0)
        return RecoveryResult(0, 0, 0, False, 0)
    scan_from, dispatch_from = scan_start(commitlog, cq_store, cp, abnormal)
    # With the CRC trailer on, every record we wrote has one: one without it is torn.
    require = config.append_prop_crc and config.check_crc_on_recover
    end, last_valid, failure = scan_commitlog(commitlog, scan_from, config.check_crc_on_recover, require)
    truncated = False
    if failure is not None:
        mf = commitlog.mfq.find_by_offset(end)
        # Zeros at the end are the clean end of data; anything else is a torn or damaged record.
        truncated = mf is not None and any(mf.read(end - mf.file_from_offset, 8))
        following = find_valid_record_after(commitlog, end, config.check_crc_on_recover, require)
        if following >= 0:
            flushed = cp.flushed_phy_offset
            if flushed >= 0 and end >= flushed:
                log.warning(
                    "unflushed CommitLog tail damaged at %d (%s); dropping it and what follows", end, failure.reason
                )
            elif config.allow_truncate_corrupt:
                log.error(
                    "CommitLog damaged at %d (%s) with valid data at %d; truncating as allowed",
                    end,
                    failure.reason,
                    following,
                )
            else:
                raise CommitLogCorruptError(end, following, failure.reason)
            if mf is not None:  # no stale record may ever be mistaken for new data
                mf.zero(end - mf.file_from_offset, mf.file_size)
            truncated = True
        if truncated:
            log.warning("CommitLog torn at phy_offset %d (%s): truncated there", end, failure.reason)
    commitlog.mfq.truncate_dirty_files(end)
    # Everything up to the end is made durable before new appends (the tail may only have been
    # in the page cache of the process that crashed).
    for mf in commitlog.mfq.files:
        if mf.file_end_offset > scan_from:
            mf.flushed_position = min(mf.flushed_position, max(scan_from - mf.file_from_offset, 0))
    commitlog.mfq.flushed_where = min(scan_from, end)
    commitlog.flush(0)
    commitlog.confirm_offset = max(last_valid, 0)
    cq_store.truncate_dirty(end)
    reput_from = min(dispatch_from, end)
    if index_service is not None:
        # With a valid checkpoint the IndexFile is durable up to `dispatched` (it is flushed
        # before the checkpoint is written); go further back only if truncation dropped files.
        files_before = len(index_service.files)
        max_indexed = index_service.truncate(end)
        if len(index_service.files) < files_before or cp.dispatched_phy_offset < 0:
            reput_from = min(reput_from, max_indexed if max_indexed >= 0 else commitlog.min_offset)
    cq_store.correct_min_offsets(commitlog.min_offset)
    reput_from = max(reput_from, commitlog.min_offset)
    # What reput's invariant needs: it restarts within the log, which ends where the scan did.
    assert commitlog.min_offset <= reput_from <= end == commitlog.max_offset, (reput_from, end, commitlog.max_offset)
    return RecoveryResult(end, reput_from, end - scan_from, truncated, commitlog.confirm_offset)


def consume_queues_agree(cq_store: ConsumeQueueStore, commitlog: CommitLog) -> bool:
    """Each queue's last unit must point at a record of that queue with that offset."""
    for (topic, queue_id), cq in cq_store.queues.items():
        if cq.max_offset <= cq.min_offset:
            continue
        unit = cq.get_unit(cq.max_offset - 1)
        if unit is None:
            return False
        phy_offset, size, _ = unit
        if phy_offset < commitlog.min_offset:
            continue
        rec = commitlog.read_record(phy_offset)
        if (
            rec is None
            or rec.total_size != size
            or rec.topic != topic
            or rec.queue_id != queue_id
            or rec.queue_offset != cq.max_offset - 1
        ):
            log.warning(
                "ConsumeQueue %s-%d disagrees with the CommitLog at queue offset %d",
                topic,
                queue_id,
                cq.max_offset - 1,
            )
            return False
    return True


def consume_queue_units_lost(cp: Checkpoint, commitlog: CommitLog, cq_store: ConsumeQueueStore) -> bool:
    """Did ConsumeQueue units below the checkpoint's dispatched offset disappear?"""
    if cp.dispatched_phy_offset < commitlog.min_offset or cp.cq_max_offset_sum < 0:
        # No checkpoint, or one older than retention: units in deleted files cannot be told
        # apart, and a needless rebuild would forget queues whose records all aged out.
        return False
    held = cq_store.units_below_sum(cp.dispatched_phy_offset)
    if held != cp.cq_max_offset_sum:
        log.warning(
            "ConsumeQueues hold %d units below phy_offset %d, the checkpoint recorded %d: rebuilding them",
            held,
            cp.dispatched_phy_offset,
            cp.cq_max_offset_sum,
        )
        return True
    return False
