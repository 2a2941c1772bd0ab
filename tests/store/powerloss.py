"""A power-loss fault layer for in-process store tests (docs/durability.md: T0.4, T1.3, T1.4).

Every durable point of the store is an ``os.fdatasync`` / ``os.fsync`` on a file's descriptor
(log/mapped_file.py, log/checkpoint.py, index/index_file.py). ``PowerLoss`` wraps both: at each one it records
the file's whole content as its *durable image*. ``crash()`` is the power cut: from then on every
sync fails with EIO (a dead machine acknowledges nothing more), and each file under the store
root goes back to its durable image, except that every 4 KiB page written since then survives
with probability ``keep_unsynced`` (the kernel may have written some dirty pages back on its own:
0 drops them all, LazyFS's lose-unfsynced-writes; in between, torn writes). A file never synced
since the cycle began goes back to its content at ``begin()``; a new one, to zeros (its name was
made durable by the directory fsync, its data was not).

``config/*.json`` is left alone: it is written to a temporary file, fsync'd, renamed over the old
one and the directory fsync'd (metadata.write_atomically), so it is durable when the write returns
and an interrupted write leaves the old file. The ``lock`` and ``abort`` files carry no data.
``apply`` also gives the machine a new boot id, as the reboot after a power cut does: the lite
index (LMDB, whose syncs this layer does not see) is then rebuilt from the CommitLog.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from pathlib import Path

from services.store.lite import index as lite_index

PAGE = 4096
SKIPPED_NAMES = {"lock", "abort"}


class PowerLoss:
    def __init__(self, root: Path, seed: int, keep_unsynced: float = 0.0) -> None:
        self.root = Path(root).resolve()
        self.random = random.Random(seed)
        self.keep_unsynced = keep_unsynced
        self.crashed = False
        self._images: dict[Path, bytes] = {}
        self._baseline: dict[Path, bytes] = {}
        self._lock = threading.Lock()
        self._real_fdatasync = os.fdatasync
        self._real_fsync = os.fsync
        self.syncs = 0

    def _files(self) -> list[Path]:
        return [
            p
            for p in self.root.rglob("*")
            if p.is_file() and p.name not in SKIPPED_NAMES and "config" not in p.relative_to(self.root).parts
        ]

    def begin(self, monkeypatch) -> None:  # (pytest's MonkeyPatch)
        """Take the files as they are now as durable, and start recording syncs."""
        self._baseline = {p: p.read_bytes() for p in self._files()}
        self._images = {}
        self.crashed = False
        self._monkeypatch = monkeypatch
        monkeypatch.setattr(os, "fdatasync", self._sync(self._real_fdatasync))
        monkeypatch.setattr(os, "fsync", self._sync(self._real_fsync))

    def _sync(self, real):
        def sync(fd: int) -> None:
            if self.crashed:
                raise OSError(errno.EIO, "power lost")
            try:
                path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                path = None
            if path is not None and path.is_file() and self.root in path.parents:
                with self._lock:  # the content the sync makes durable (read before it returns)
                    self._images[path] = path.read_bytes()
                    self.syncs += 1
            real(fd)

        return sync

    def crash(self) -> None:
        """The power cut: later syncs fail; call ``apply`` once the store's threads stopped."""
        with self._lock:
            self.crashed = True

    def apply(self) -> dict[str, int]:
        """Rewrite every data file as the disk would hold it after the cut (page counts); then
        the power is back."""
        counts = {"files": 0, "pages_dropped": 0, "pages_kept": 0}
        for path in self._files():
            current = path.read_bytes()
            durable = self._images.get(path, self._baseline.get(path))
            if durable is None:
                durable = bytes(len(current))
            durable = durable[: len(current)].ljust(len(current), b"\0")
            if durable == current:
                continue
            out = bytearray(durable)
            for start in range(0, len(current), PAGE):
                page = current[start : start + PAGE]
                if page == durable[start : start + PAGE]:
                    continue
                if self.random.random() < self.keep_unsynced:
                    out[start : start + PAGE] = page
                    counts["pages_kept"] += 1
                else:
                    counts["pages_dropped"] += 1
            path.write_bytes(bytes(out))
            counts["files"] += 1
        with self._lock:  # the power is back: syncs work again (``begin`` starts the next cycle)
            self.crashed = False
            self._images = {}
        # The machine boots again: a new boot id (what tells the store its page cache is gone).
        new_boot = f"power-loss-{self.random.getrandbits(64):016x}"
        self._monkeypatch.setattr(lite_index, "boot_id", lambda: new_boot)
        return counts
