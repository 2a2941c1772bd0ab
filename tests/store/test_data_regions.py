"""Recovery searches only a segment's data regions for records past a damaged one
(recovery.data_regions): the unused rest of a fallocated segment is never read."""

from __future__ import annotations

import os

from services.store.log.recovery import data_regions

MIB = 1 << 20


def test_regions_are_the_written_parts_of_a_fallocated_file(tmp_path):
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 64 * MIB)
        os.pwrite(fd, b"x" * 10_000, 0)
        os.pwrite(fd, b"y" * 4096, 40 * MIB)
        regions = data_regions(fd, 5_000, 64 * MIB)
        # page-granular: the first written page run, then the lone page at 40 MiB
        assert regions[0][0] == 5_000 and regions[0][1] >= 10_000
        assert regions[-1][0] <= 40 * MIB < regions[-1][1] <= 40 * MIB + 64 * 1024
        assert sum(end - start for start, end in regions) < MIB  # not the 64 MiB
        assert data_regions(fd, 41 * MIB, 64 * MIB) == []
    finally:
        os.close(fd)


def test_without_a_file_everything_is_searched():
    assert data_regions(-1, 8, 100) == [(8, 100)]
