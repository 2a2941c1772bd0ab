"""The scheduler's small files: ``config/timercheck``, ``config/timermetrics``, ``config/delaycheck``
and ``lock``.

Layouts: ``services/domain/format/timercheck_format.py``, ``timermetrics_format.py``,
``delaycheck_format.py``.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from services.domain.format.delaycheck_format import (
    DELAY_CHECK_FILE_SIZE_BYTES,
    NONE,
    decode_entry,
    encode_entry,
    entry_position,
    header_bytes,
    header_ok,
)
from services.domain.format.timercheck_format import (
    TIMER_CHECK_FILE_SIZE_BYTES,
    TimerCheck,
    decode_timer_check,
    encode_timer_check,
)
from services.domain.format.timermetrics_format import (
    TimerMetricsDocument,
    decode_timer_metrics,
    encode_timer_metrics,
)
from services.scheduler.errors import SchedulerLockedError

log = logging.getLogger(__name__)


class TimerCheckFile:
    """Read once at start; rewritten in place (pwrite + fdatasync) after each flush."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.loaded = decode_timer_check(os.pread(self.fd, TIMER_CHECK_FILE_SIZE_BYTES, 0))

    def save(self, check: TimerCheck) -> None:
        os.pwrite(self.fd, encode_timer_check(check), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class TimerMetricsFile:
    """RocketMQ's ``timermetrics`` JSON, replaced atomically: ``<name>.tmp`` written and fsynced,
    ``<name>`` renamed to ``<name>.bak``, ``<name>.tmp`` to ``<name>``, the directory fsynced
    (RocketMQ's ``persist`` keeps the same ``.bak``). Written just before ``timercheck``."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.backup_path = path.with_name(path.name + ".bak")

    def load(self, counter_max: int) -> TimerMetricsDocument | None:
        """The newest of ``<name>``, ``<name>.bak`` written for a checkpoint no later than
        ``counter_max`` (a file ahead of ``timercheck`` belongs to a checkpoint never written)."""
        for candidate in (self.path, self.backup_path):
            try:
                document = decode_timer_metrics(candidate.read_text("utf-8"))
            except FileNotFoundError:
                continue
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("ignoring %s: %s", candidate, exc)
                continue
            if document.counter <= counter_max:
                return document
            log.info("%s is for checkpoint %d, after timercheck's %d", candidate, document.counter, counter_max)
        return None

    def save(self, document: TimerMetricsDocument) -> None:
        temp = self.path.with_name(self.path.name + ".tmp")
        with open(temp, "wb") as file:
            file.write(encode_timer_metrics(document).encode("ascii"))
            file.flush()
            os.fsync(file.fileno())
        try:
            os.replace(self.path, self.backup_path)
        except FileNotFoundError:
            pass
        os.replace(temp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class DelayCheckFile:
    """Per delay level, the queue offsets of the batch being put (page cache writes: a
    ``kill -9`` keeps them; a power loss may lose them and with them a duplicate count)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self.fd, DELAY_CHECK_FILE_SIZE_BYTES, 0)
        if not header_ok(data):
            os.ftruncate(self.fd, 0)
            os.ftruncate(self.fd, DELAY_CHECK_FILE_SIZE_BYTES)
            os.pwrite(self.fd, header_bytes(), 0)
            data = b""
        self._loaded = data

    def in_flight(self, level: int) -> tuple[int, int]:
        """(begin, end) recorded at start-up for the level, or (-1, -1)."""
        return decode_entry(self._loaded, level) if self._loaded else NONE

    def mark(self, level: int, begin: int, end: int) -> None:
        os.pwrite(self.fd, encode_entry(begin, end), entry_position(level))

    def clear(self, level: int) -> None:
        self.mark(level, *NONE)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SchedulerLock:
    """``lock`` is flock'ed while a scheduler runs on the directory (one scheduler per store)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            self.fd = -1
            raise SchedulerLockedError(f"{path.parent} is in use by another scheduler process") from exc
        os.pwrite(self.fd, b"lock", 0)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1
