"""``epochFileCheckpoint``: the epochs a replica's CommitLog was written under (RocketMQ 5,
``EpochFileCache`` through ``CheckpointFile``). UTF-8 text, one item per line, ``\\n`` ends each
line (Java's ``BufferedWriter.newLine`` on Linux):

| line | content | meaning |
|---|---|---|
| 1 | ``N`` (decimal) | the number of entry lines that follow |
| 2 .. N+1 | ``epoch-startOffset`` (two decimals joined by ``-``) | an EpochEntry |

For example a replica that was written under epoch 1 from phy_offset 0, and under epoch 3 from
phy_offset 4096::

    2
    1-0
    3-4096

Only ``epoch`` and ``startOffset`` are stored. ``endOffset`` is derived: an entry ends where
the next one starts, and the last one at the CommitLog's max phy_offset (RocketMQ keeps
``Long.MAX_VALUE`` there until ``setLastEpochEntryEndOffset`` is called with it).

Differences from RocketMQ, all stricter on reading: RocketMQ skips a line that does not split
into two fields and only then fails on the count; here any malformed line, a negative number,
an epoch beyond int32, an offset beyond int64, entries out of order (epochs must grow, start
offsets must not go back) or a count that disagrees is an ``EpochFileError`` naming the line.
RocketMQ writes nothing at all for an empty list (the old file stays); pyrmq writes ``0``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
END_OFFSET_UNKNOWN = INT64_MAX  # RocketMQ's EpochEntry.endOffset default: Long.MAX_VALUE
LINE_LENGTH_MAX = 64  # "2147483647-9223372036854775807" is 30 characters


class EpochFileError(ValueError):
    """An epochFileCheckpoint text that cannot be decoded; the message names the line."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One epoch of a replica's CommitLog: records in [start_offset, end_offset) were written
    by the master of ``epoch`` (RocketMQ's ``EpochEntry``: epoch, startOffset, endOffset)."""

    epoch: int
    start_offset: int
    end_offset: int = END_OFFSET_UNKNOWN

    def __post_init__(self) -> None:
        if not 0 <= self.epoch <= INT32_MAX:
            raise EpochFileError(f"epoch {self.epoch} is not an int32 >= 0")
        if not 0 <= self.start_offset <= self.end_offset <= INT64_MAX:
            raise EpochFileError(f"epoch {self.epoch}: bad range [{self.start_offset}, {self.end_offset})")


def check_order(entries: Iterable[EpochEntry]) -> None:
    """Raise EpochFileError unless epochs strictly grow and start offsets never go back."""
    previous: EpochEntry | None = None
    for entry in entries:
        if previous is not None:
            if entry.epoch <= previous.epoch:
                raise EpochFileError(f"epoch {entry.epoch} does not follow epoch {previous.epoch}")
            if entry.start_offset < previous.start_offset:
                raise EpochFileError(
                    f"epoch {entry.epoch} starts at {entry.start_offset}, before epoch {previous.epoch} "
                    f"({previous.start_offset})"
                )
        previous = entry


def encode_epoch_file(entries: Iterable[EpochEntry]) -> str:
    """The file's text for ``entries`` (oldest first; endOffset is not stored)."""
    entries = list(entries)
    check_order(entries)
    return "".join([f"{len(entries)}\n", *(f"{e.epoch}-{e.start_offset}\n" for e in entries)])


def _decimal(text: str, what: str, line_number: int, maximum: int) -> int:
    if not text or not text.isascii() or not text.isdigit():
        raise EpochFileError(f"line {line_number}: {what} {text!r} is not a decimal number")
    value = int(text)
    if value > maximum:
        raise EpochFileError(f"line {line_number}: {what} {value} is out of range")
    return value


def decode_epoch_file(text: str) -> list[EpochEntry]:
    """The entries of an epochFileCheckpoint text (oldest first, endOffset derived from the
    next entry's start; the last one's stays END_OFFSET_UNKNOWN). Raises EpochFileError."""
    if not text:
        raise EpochFileError("empty epoch file (a missing file is an empty history; an empty one is damage)")
    if not text.endswith("\n"):
        raise EpochFileError("the last line is not terminated (torn write?)")
    lines = text[:-1].split("\n")
    for number, line in enumerate(lines, 1):
        if len(line) > LINE_LENGTH_MAX:
            raise EpochFileError(f"line {number}: longer than {LINE_LENGTH_MAX} characters")
    count = _decimal(lines[0].rstrip("\r"), "entry count", 1, INT32_MAX)
    if count != len(lines) - 1:
        raise EpochFileError(f"line 1: expects {count} entries, found {len(lines) - 1}")
    starts: list[tuple[int, int]] = []
    for number, line in enumerate(lines[1:], 2):
        fields = line.rstrip("\r").split("-")
        if len(fields) != 2:
            raise EpochFileError(f"line {number}: {line!r} is not 'epoch-startOffset'")
        starts.append(
            (
                _decimal(fields[0], "epoch", number, INT32_MAX),
                _decimal(fields[1], "startOffset", number, INT64_MAX),
            )
        )
    for i in range(1, len(starts)):
        (epoch, start), (previous_epoch, previous_start) = starts[i], starts[i - 1]
        if epoch <= previous_epoch:
            raise EpochFileError(f"line {i + 2}: epoch {epoch} does not follow epoch {previous_epoch}")
        if start < previous_start:
            raise EpochFileError(f"line {i + 2}: startOffset {start} goes back from {previous_start}")
    return [
        EpochEntry(epoch, start, starts[i + 1][1] if i + 1 < len(starts) else END_OFFSET_UNKNOWN)
        for i, (epoch, start) in enumerate(starts)
    ]
