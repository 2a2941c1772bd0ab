"""A small filesystem of the test's own, and a ballast that fills it: what a full disk looks like
to a process that writes through ``mmap`` (the ENOSPC monkeypatches of tests/store/test_disk_full.py
only reach ``posix_fallocate``; a store into a hole on a really full tmpfs is SIGBUS).

``small_disk`` mounts a tmpfs (root only: CI runs as root; elsewhere the test skips, and fails
under PYRMQ_REQUIRE_COMPONENTS=1). ``fill`` is also the nemesis's disk-full fault.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.components import components_required


def fill(fd: int, size: int, step_min: int = 4096) -> int:
    """Allocate up to ``size`` bytes to ``fd``, in ever smaller steps once the filesystem says
    ENOSPC (the service writes beside it): the bytes allocated, within ``step_min`` of full."""
    offset, step = 0, size
    while step >= step_min and offset < size:
        step = min(step, size - offset)
        try:
            os.posix_fallocate(fd, offset, step)
            offset += step
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            step //= 2
    return offset


def fill_disk(directory: Path, leave_bytes: int = 0) -> Path:
    """A ``ballast`` file in ``directory`` that takes all its filesystem's free space but
    ``leave_bytes`` (delete it to free the space)."""
    ballast = directory / "ballast"
    fs = os.statvfs(directory)
    with open(ballast, "wb") as f:
        fill(f.fileno(), fs.f_bavail * fs.f_frsize - leave_bytes)
    return ballast


@contextlib.contextmanager
def small_disk(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted at ``path`` for the block."""
    if os.geteuid() != 0:
        if components_required():
            pytest.fail("a small disk needs root (mount -t tmpfs); CI runs as root", pytrace=False)
        pytest.skip("a small disk needs root (mount -t tmpfs)")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "pyrmq-test-disk", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)
