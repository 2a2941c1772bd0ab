"""The buffers the format modules read from and write into: bytes, or a view of a mapped file.
Format code never opens files; callers hand it these."""

from __future__ import annotations

import mmap
from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
WritableBuffer: TypeAlias = bytearray | memoryview | mmap.mmap
