"""Small IndexFiles for tests: the geometry (``SLOTS``, ``ENTRIES``, ``FILE_SIZE``), the clock's
start ``T0``, ``FAR_FUTURE``, the transaction sys flags the dispatch filters look at, and
``new_service`` / ``file_bytes``. Used by tests/store/test_index_file.py and test_index_batch.py."""

from __future__ import annotations

from pathlib import Path

from services.runtime.clock import ManualClock
from services.store.index.index_file import IndexFile
from services.store.index.service import IndexService

SLOTS = 100
ENTRIES = 400
FILE_SIZE = 40 + SLOTS * 4 + ENTRIES * 20
T0 = 1_700_000_000_500  # 0x0000018bcfe569f4
FAR_FUTURE = 1 << 62

SYSFLAG_PREPARED = 0x4
SYSFLAG_COMMIT = 0x8
SYSFLAG_ROLLBACK = 0xC


def new_service(tmp_path: Path, entries: int = ENTRIES, clock: ManualClock | None = None, **kwargs) -> IndexService:
    return IndexService(tmp_path / "index", SLOTS, entries, clock or ManualClock(T0), **kwargs)


def file_bytes(index_file: IndexFile) -> bytes:
    return index_file.path.read_bytes()
