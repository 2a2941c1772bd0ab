"""TimerWheel: the ``timerwheel`` file, mmapped (38.7 MB at RocketMQ's defaults).

One 32-byte slot per ``precision_ms`` of time, two windows of ``slots_total`` slots in a ring
(``services/domain/format/timerwheel_format.py``). A slot names the head (``last_pos``) of the
TimerLog chain of units due in it. The wheel is a cache of the TimerLog: recovery revises it
from the units the checkpoint may not cover (``revise_slot``). Writes go to the mapping, i.e. the page cache,
so a ``kill -9`` loses none; ``flush`` (msync) makes them survive a power loss. The file's blocks
are reserved when it is opened (a full disk stops the start with ENOSPC, never a write with SIGBUS).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from services.domain.format.timerwheel_format import (
    EMPTY_SLOT,
    SLOT,
    SLOT_DTYPE,
    SLOT_SIZE_BYTES,
    Slot,
    decode_slot,
    slot_index,
    wheel_file_size_bytes,
)
from services.runtime.files import reserve_blocks


class TimerWheel:
    def __init__(self, path: Path, slots_total: int, precision_ms: int) -> None:
        self.path = path
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.size_bytes = wheel_file_size_bytes(slots_total)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if length not in (0, self.size_bytes):
                raise ValueError(
                    f"timer wheel {path} is {length} bytes, expected {self.size_bytes} (was timer_wheel_slots changed?)"
                )
            if length == 0:
                os.ftruncate(fd, self.size_bytes)
            # Every slot gets its blocks before the mapping writes one (a store into a hole on a
            # full disk is SIGBUS; this is ENOSPC at start-up); free for a file that has them.
            reserve_blocks(fd, 0, self.size_bytes)
            self._mm = mmap.mmap(fd, self.size_bytes)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._mm.close()

    def _position(self, time_ms: int) -> int:
        return slot_index(time_ms, self.precision_ms, self.slots_total) * SLOT_SIZE_BYTES

    def get_slot(self, time_ms: int) -> Slot:
        """The slot of ``time_ms``; EMPTY_SLOT unless it holds that very time."""
        return decode_slot(self._mm, self._position(time_ms), time_ms, self.precision_ms)

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> None:
        SLOT.pack_into(self._mm, self._position(time_ms), time_ms // self.precision_ms, first_pos, last_pos, num, magic)

    def head(self, time_ms: int) -> tuple[int, int, int, int]:
        """(byte position, first_pos, last_pos, num) of the slot of ``time_ms``, as seen for that
        time (-1, -1, 0 when the slot holds another time): the enqueue's fast path."""
        position = self._position(time_ms)
        stored, first_pos, last_pos, num, _ = SLOT.unpack_from(self._mm, position)
        if stored != time_ms // self.precision_ms:
            return position, -1, -1, 0
        return position, first_pos, last_pos, num

    def relink(self, position: int, time_ms: int, first_pos: int, last_pos: int, num: int) -> None:
        """Rewrite the slot at byte ``position`` (from ``head``)."""
        SLOT.pack_into(self._mm, position, time_ms // self.precision_ms, first_pos, last_pos, num, 0)

    def revise_slot(self, time_ms: int, position: int, num_delta: int) -> None:
        """Recovery (RocketMQ's ``reviseSlot(force)``): a unit at ``position`` belongs to this
        slot; if the slot does not know it yet (it is past the head), it becomes the head.
        Idempotent: replaying units the wheel already holds changes nothing."""
        slot = self.get_slot(time_ms)
        if slot is EMPTY_SLOT:
            self.put_slot(time_ms, position, position, num_delta)
        elif position > slot.last_pos:
            self.put_slot(time_ms, slot.first_pos, position, slot.num + num_delta, slot.magic)

    def flush(self) -> None:
        self._mm.flush()

    @contextlib.contextmanager
    def slot_table(self) -> Iterator[np.ndarray]:
        """Every slot as a structured array over the mapping (no copy; valid inside the block)."""
        view = np.frombuffer(self._mm, dtype=SLOT_DTYPE)
        try:
            yield view
        finally:
            del view

    def counts_ahead(self, from_time_ms: int, bounds_slots: list[int]) -> list[int]:
        """RocketMQ's timer distribution: the ``num`` of the slots in ``[previous bound, bound)``
        slots from ``from_time_ms``, per bound (bounds ascending, capped at the ring's length)."""
        ring_slots = 2 * self.slots_total
        span = min(max(bounds_slots), ring_slots) if bounds_slots else 0
        first = from_time_ms // self.precision_ms
        times = np.arange(first, first + span, dtype=np.int64)
        with self.slot_table() as table:
            rows = table[times % ring_slots]  # a copy: nothing refers to the mapping after the block
        nums = np.where(rows["time"] == times, rows["num"].astype(np.int64), 0)
        totals = np.concatenate(([0], np.cumsum(nums)))
        counts, low = [], 0
        for bound in bounds_slots:
            high = min(bound, span)
            counts.append(int(totals[high] - totals[min(low, high)]))
            low = high
        return counts

    def pending_count(self, from_time_ms: int) -> int:
        """RocketMQ's ``getAllNum``: the ``num`` of every slot at or after ``from_time_ms``."""
        with self.slot_table() as table:
            live = table["time"] >= from_time_ms // self.precision_ms
            return int(table["num"][live].astype(np.int64).sum())
