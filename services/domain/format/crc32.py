"""CRC32 of CommitLog record bytes: the body CRC and the whole-record ``__CRC32#`` trailer.

The polynomial and values of ``zlib.crc32`` (java.util.zip.CRC32). python-isal's ``crc32``
(Intel ISA-L) returns the same values about 6x faster on a 1 KiB record (91 ns against 583 ns
measured here); with two CRCs per message on the put path, and one or two per record when
recovery scans, that is about 1 µs of the ~8 µs a message costs the store in Python. Falls back
to zlib where isal is not installed.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; kept for odd platforms
    from zlib import crc32

__all__ = ["crc32"]
