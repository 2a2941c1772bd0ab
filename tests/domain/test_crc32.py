"""The CommitLog's CRC32 (python-isal) gives zlib's values, on bytes and on views of a mapping."""

from __future__ import annotations

import mmap
import zlib

from hypothesis import given
from hypothesis import strategies as st

from services.domain.format.crc32 import crc32


def test_isal_is_in_use():
    assert crc32.__module__.startswith("isal"), "isal is a dependency: the zlib fallback is for odd platforms"


@given(st.binary(max_size=5000))
def test_same_values_as_zlib(data):
    assert crc32(data) == zlib.crc32(data)
    assert crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])


def test_views_of_a_mapping():
    mm = mmap.mmap(-1, 8192)
    mm[100:1200] = bytes(range(256)) * 4 + b"x" * 76
    view = memoryview(mm)
    try:
        assert crc32(view[100:1200]) == zlib.crc32(mm[100:1200]) == crc32(mm[100:1200])
    finally:
        view.release()
        mm.close()
