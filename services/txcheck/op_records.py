"""Op records: which half messages are resolved.

EndTransaction writes one op record per resolution (its format, writer and reader are in
``services.domain.contracts.transaction``). ``OpTracker`` holds the op records read in one
pass, from the committed op offset on:

* ``is_resolved(h)``: some op record lists half offset ``h`` (only ``h >= floor``, the pass's
  first half offset, are kept: the ones below it were passed in an earlier pass);
* ``next_op_offset(h)``: once every half offset below ``h`` is passed, the op offset to commit:
  the first op record that still lists an offset ``>= h`` (RocketMQ's ``calculateOpOffset`` over
  ``doneOpOffset``), or the read position if there is none.

Invariant: ``start <= next_op_offset(h) <= read_offset``, and every op record that lists an
offset ``>= h`` sits at or after ``next_op_offset(h)`` (so a restart from the committed pair
forgets no resolution of a half it has not passed).
"""

from __future__ import annotations

from services.domain.contracts.transaction import decode_op
from services.store.client.model import StoredMessage


class OpTracker:
    def __init__(self, start_offset: int, floor: int) -> None:
        self.start = start_offset  # the committed op offset this pass began at
        self.read_offset = start_offset  # next op offset to read
        self.floor = floor  # the pass's first half offset
        self._listed: dict[int, tuple[int, ...]] = {}  # op offset -> half offsets it lists (>= floor)
        self._resolved: dict[int, int] = {}  # half offset -> first op offset listing it

    def add(self, record: StoredMessage) -> None:
        """Take one op record (read in queue order)."""
        op_offset = record.queue_offset
        assert op_offset >= self.read_offset, f"op record {op_offset} read twice or out of order"
        kept = tuple(o for o in decode_op(record.properties, record.body) if o >= self.floor)
        if kept:
            self._listed[op_offset] = kept
        for half_offset in kept:
            self._resolved.setdefault(half_offset, op_offset)
        self.read_offset = op_offset + 1

    def skip_to(self, offset: int) -> None:
        """Op records below ``offset`` are gone (retention) or missing: nothing to learn."""
        self.read_offset = max(self.read_offset, offset)

    def is_resolved(self, half_offset: int) -> bool:
        return half_offset in self._resolved

    def next_op_offset(self, half_offset: int) -> int:
        for op_offset in sorted(self._listed):
            if max(self._listed[op_offset]) >= half_offset:
                return op_offset
        return self.read_offset

    def __len__(self) -> int:
        return len(self._listed)
