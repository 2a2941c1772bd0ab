"""The ``checkpoint`` file, the ``abort`` marker and the ``lock`` file of a store root."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from services.domain.format.checkpoint_format import (
    CHECKPOINT_FILE_SIZE_BYTES,
    decode_checkpoint,
    encode_checkpoint,
)
from services.store.errors import StoreLockedError


class CheckpointFile:
    """Read once at start; rewritten in place (pwrite + fdatasync) by the flush services.

    ``lock`` is held from reading an offset to storing it in ``current`` (and, for the
    ConsumeQueue flush, to saving): a CommitLog truncation (``replica_log.py``) lowers the
    offsets under it, so no value read before the truncation is stored after it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self.fd, CHECKPOINT_FILE_SIZE_BYTES, 0)
        self.loaded = decode_checkpoint(data)
        self.current = decode_checkpoint(data)

    def save(self) -> None:
        os.pwrite(self.fd, encode_checkpoint(self.current), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class StoreLock:
    """``lock`` holds 4 bytes "lock" and is flock'ed while a store runs on the root."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            raise StoreLockedError(f"store root {path.parent} is in use by another process") from exc
        os.pwrite(self.fd, b"lock", 0)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def abort_file_exists(path: Path) -> bool:
    return path.exists()


def create_abort_file(path: Path) -> None:
    path.write_text(str(os.getpid()))


def delete_abort_file(path: Path) -> None:
    path.unlink(missing_ok=True)
