"""IndexService's vectorised batch path: split, hash and put the keys of a large dispatch
batch with numpy (see service.py for the semantics it must keep byte for byte: the bytes
``index_file.put_entry`` writes for each key; tests/store/test_index_batch.py compares them)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from services.domain.format.commitlog_format import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
)
from services.domain.format.index_format import (
    INDEX_ENTRY_DTYPE,
    INDEX_ENTRY_SIZE_BYTES,
    INDEX_HEADER_SIZE_BYTES,
    JAVA_INT_MAX,
    index_key_hashes_of_ranges,
    text_units,
)
from services.store.index.index_file import (
    _FIELD_SEPARATOR,
    _FIELD_SEPARATOR_UNIT,
    _KEY_SEPARATOR,
    _KEY_SEPARATOR_UNIT,
    _SLOTS_DTYPE,
    IndexFile,
    _get_keys,
    _get_phy_offset,
    _get_store_timestamp_ms,
    _get_sys_flag,
    _get_topic,
    _get_uniq_key,
    _set_header_fields,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from services.store.model import DispatchRequest


class _IndexService(Protocol):
    """What the numpy path uses of IndexService (service.py), which it is mixed into."""

    hash_slot_num: int
    index_num_max: int
    _lock: threading.Lock
    _files: tuple[IndexFile, ...]
    _prefix_hashes: dict[str, int]

    def _prefix_hash(self, topic: str) -> int: ...
    def _roll_locked(self) -> IndexFile: ...
    def _put_run_np_locked(
        self,
        index_file: IndexFile,
        key_hashes: np.ndarray,
        slots: np.ndarray,
        phy_offsets: np.ndarray,
        timestamps: np.ndarray,
    ) -> None: ...


class NumpyIndexBatch:
    """The numpy path of IndexService.build_index_batch (mixed into IndexService)."""

    def _build_batch_np(self: _IndexService, requests: Sequence[DispatchRequest]) -> bool:
        """build_index_batch with numpy, for the usual batch (see there). False, with nothing
        done, for any other batch."""
        n = len(requests)
        # "uniq\x01keys\x01uniq\x01keys...": a field separator no key holds (RocketMQ's
        # property encoding reserves it); counted, to be sure.
        fields = [""] * (2 * n)
        fields[0::2] = map(_get_uniq_key, requests)
        fields[1::2] = map(_get_keys, requests)
        joined = _FIELD_SEPARATOR.join(fields)
        if joined.count(_FIELD_SEPARATOR) != 2 * n - 1:
            return False
        try:
            units = text_units(joined)
            sys_flags = np.array(list(map(_get_sys_flag, requests)), np.int64)
            phy_offsets = np.array(list(map(_get_phy_offset, requests)), np.int64)
            timestamps = np.array(list(map(_get_store_timestamp_ms, requests)), np.int64)
        except (UnicodeEncodeError, OverflowError):
            return False  # a lone surrogate, a value past Java's long: fail where build_index does
        # Key boundaries: every field separator, and each key separator inside a KEYS field
        # (an odd field number: an odd count of field separators before it). Key j runs from
        # after boundary j-1 to boundary j.
        if _KEY_SEPARATOR in joined:
            candidates = np.flatnonzero((units == _FIELD_SEPARATOR_UNIT) | (units == _KEY_SEPARATOR_UNIT))
            is_field_separator = units[candidates] == _FIELD_SEPARATOR_UNIT
            is_boundary = is_field_separator | (np.cumsum(is_field_separator) & 1).astype(np.bool_)
            boundaries = candidates[is_boundary]
            # A key's field: the number of field separators among the boundaries before it.
            record_of_key = np.zeros(len(boundaries) + 1, np.int64)
            np.cumsum(is_field_separator[is_boundary], out=record_of_key[1:])
            record_of_key >>= 1
        else:  # one key per field
            boundaries = np.flatnonzero(units == _FIELD_SEPARATOR_UNIT)
            record_of_key = np.arange(2 * n, dtype=np.int64) >> 1
        count = len(boundaries) + 1
        starts = np.zeros(count, np.int64)
        np.add(boundaries, 1, out=starts[1:])
        lengths = np.empty(count, np.int64)
        lengths[:-1] = boundaries
        lengths[-1] = len(units)
        lengths -= starts
        rollback = (sys_flags & SYSFLAG_TRANSACTION_MASK) == SYSFLAG_TRANSACTION_ROLLBACK_TYPE
        # Empty keys and the keys of ROLLBACK records are dropped; the rest are put in order.
        kept = lengths > 0
        if rollback.any():
            kept &= ~rollback[record_of_key]
        if not kept.all():
            starts = starts[kept]
            lengths = lengths[kept]
            record_of_key = record_of_key[kept]
            if not len(starts):
                return True
        key_phy_offsets = phy_offsets[record_of_key]
        # None may be skipped or partial: phy offsets strictly increase from record to record
        # (the check against the last file's end is made under the lock).
        if (
            len(starts) > 1
            and not ((key_phy_offsets[1:] > key_phy_offsets[:-1]) | (record_of_key[1:] == record_of_key[:-1])).all()
        ):
            return False
        topics = list(map(_get_topic, requests))
        prefix_hashes = self._prefix_hashes
        record_prefixes = list(map(prefix_hashes.get, topics))
        if None in record_prefixes:
            for topic in set(topics):
                if topic not in prefix_hashes:
                    self._prefix_hash(topic)
            record_prefixes = list(map(prefix_hashes.get, topics))
            if None in record_prefixes:  # the cache was cleared under us
                record_prefixes = [self._prefix_hash(topic) for topic in topics]
        key_hashes = index_key_hashes_of_ranges(
            units, starts, lengths, np.array(record_prefixes, np.uint32)[record_of_key]
        )
        slots = key_hashes % self.hash_slot_num
        key_timestamps = timestamps[record_of_key]
        with self._lock:
            files = self._files
            if files and key_phy_offsets[0] <= files[-1].end_phy_offset:
                return False  # re-dispatch: skips or the partial rule apply
            total = len(key_hashes)
            done = 0
            while done < total:
                files = self._files
                index_file = files[-1] if files else None
                if index_file is None or index_file.index_count >= self.index_num_max:
                    index_file = self._roll_locked()  # header pre-set from the old file's end
                end = done + min(total - done, self.index_num_max - index_file.index_count)
                self._put_run_np_locked(
                    index_file,
                    key_hashes[done:end],
                    slots[done:end],
                    key_phy_offsets[done:end],
                    key_timestamps[done:end],
                )
                done = end
        return True

    def _put_run_np_locked(
        self: _IndexService,
        index_file: IndexFile,
        key_hashes: np.ndarray,
        slots: np.ndarray,
        phy_offsets: np.ndarray,
        timestamps: np.ndarray,
    ) -> None:
        """``put_key_hash`` for each key in order, vectorised; they all fit in ``index_file``.

        Key k gets index ``index_count + k``. Its prev_index is the index of the latest earlier
        key of the run in the same slot, else the slot's value on disk when that is in
        (0, its own index], else 0 (and hash_slot_count grows). time_diff is against the
        header's begin_timestamp, which the run's first key replaces in a file's first entry.
        Written in the order entries, header attributes (what queries read), slots, header
        bytes: a query never follows a slot to an entry beyond index_count, and the header on
        disk never covers an entry whose slot is not written."""
        n = len(key_hashes)
        index_count = index_file.index_count
        index_file.reserve(index_count + n)  # blocks first: ENOSPC here, not SIGBUS below
        indexes = np.arange(index_count, index_count + n, dtype=np.int64)
        begin_timestamp_ms = index_file.begin_timestamp_ms
        begin_phy_offset = index_file.begin_phy_offset
        first_begin_timestamp_ms = begin_timestamp_ms  # what the run's first key is against
        if index_count <= 1:  # the run's first key is the file's first entry
            begin_timestamp_ms = int(timestamps[0])
            begin_phy_offset = int(phy_offsets[0])
        entries = np.empty(n, INDEX_ENTRY_DTYPE)
        entries["key_hash"] = key_hashes
        entries["phy_offset"] = phy_offsets
        if begin_timestamp_ms > 0:
            # (t - begin) // 1000 is < 0 exactly when t < begin: the max covers "t <= begin -> 0".
            time_diffs = timestamps - begin_timestamp_ms
            time_diffs //= 1000
            np.maximum(time_diffs, 0, out=time_diffs)
            np.minimum(time_diffs, JAVA_INT_MAX, out=time_diffs)
            entries["time_diff"] = time_diffs
        else:
            entries["time_diff"] = 0
        if first_begin_timestamp_ms != begin_timestamp_ms:
            timestamp_ms = int(timestamps[0])
            entries["time_diff"][0] = (
                0
                if first_begin_timestamp_ms <= 0 or timestamp_ms <= first_begin_timestamp_ms
                else min((timestamp_ms - first_begin_timestamp_ms) // 1000, JAVA_INT_MAX)
            )
        mm = index_file.mapping
        start = index_file._entries_pos + index_count * INDEX_ENTRY_SIZE_BYTES
        slot_view = np.frombuffer(mm, _SLOTS_DTYPE, count=self.hash_slot_num, offset=INDEX_HEADER_SIZE_BYTES)
        try:
            # As if no slot repeats within the run (the usual case): read every slot first.
            prev_indexes = slot_view[slots].astype(np.int64)
            prev_indexes[(prev_indexes <= 0) | (prev_indexes > indexes)] = 0
            entries["prev_index"] = prev_indexes
            mm[start : start + n * INDEX_ENTRY_SIZE_BYTES] = entries.tobytes()
            # The entries are written: a query may follow a slot to any of them from now on,
            # so index_count (and the rest) are published before the slots change.
            _set_header_fields(
                index_file,
                begin_timestamp_ms,
                int(timestamps[-1]),
                begin_phy_offset,
                int(phy_offsets[-1]),
                index_file.hash_slot_count,
                index_count + n,
            )
            slot_view[slots] = indexes
            if not (slot_view[slots] == indexes).all():
                # A slot repeats (some key reads back another's index): chain each repeat to
                # the previous one, and leave the last one in the slot. (Meanwhile a query
                # may miss some of the run's own keys, never an older one.)
                order = np.argsort(slots, kind="stable")
                repeat = slots[order[1:]] == slots[order[:-1]]
                prev_indexes[order[1:][repeat]] = indexes[order[:-1][repeat]]
                entries["prev_index"] = prev_indexes
                mm[start : start + n * INDEX_ENTRY_SIZE_BYTES] = entries.tobytes()
                last = order[np.append(~repeat, True)]
                slot_view[slots[last]] = indexes[last]
        finally:
            del slot_view  # the mapping cannot be closed while a view of it exists
        index_file.hash_slot_count += n - int(np.count_nonzero(prev_indexes))
        index_file.write_header()
