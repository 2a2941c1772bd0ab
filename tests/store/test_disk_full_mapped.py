"""A really full disk under the files written through ``mmap`` (the IndexFile, the timer wheel):
a store into a hole of a sparse mapped file on a full filesystem kills the process with SIGBUS
(found by `make chaos`: a slave with a full disk died, exit -7, right after its `disk-full`
windows). Blocks are reserved first, so a full disk is ENOSPC, a failed put with nothing half
written, and the dispatch's retry succeeds once space is back.

Each case runs in a child process on a tmpfs of its own (tests/support/small_disk.py): before the
fix the child died of SIGBUS (-7), which would take the test worker with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.small_disk import small_disk

ROOT = Path(__file__).resolve().parents[2]

INDEX_CHILD = r"""
import errno, json, sys
from pathlib import Path
from services.runtime.clock import ManualClock
from services.store.index import index_file
from services.store.index.service import IndexService
from services.store.model import DispatchRequest
from tests.support.small_disk import fill_disk

index_file.RESERVE_CHUNK_BYTES = 4096  # about 200 keys per reservation, so a few batches cross one
disk, how = Path(sys.argv[1]), sys.argv[2]
RECORDS = 3000
BATCH = {"numpy": 50, "loop": 5, "put_key": 1}[how]
service = IndexService(disk / "index", 64, 400_000, ManualClock(1_700_000_000_000))  # 8 MB files
service.load(True, 0)

def request(n):
    return DispatchRequest("T", 0, 1000 + 100 * n, 100, 0, 1_700_000_000_000 + n, n, f"k{n}", f"U{n}", 0, 0)

def put(start):
    if how == "put_key":  # IndexFile.put_key_hash, one key at a time
        if not service.files[-1].put_key(f"T#k{start}", 1000 + 100 * start, 1_700_000_000_000 + start):
            raise AssertionError("the file is full")
        return
    service.build_index_batch([request(n) for n in range(start, min(start + BATCH, RECORDS))])

service.build_index_batch([request(0)])  # the file, its header, slots and first chunk reserved
ballast = fill_disk(disk)
refused_at = None
for start in range(1, RECORDS, BATCH):
    try:
        put(start)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        refused_at = start
        break
ballast.unlink()
for start in range(refused_at if refused_at is not None else RECORDS, RECORDS, BATCH):
    put(start)  # the dispatch's retry, from the refused batch on
found = [n for n in range(RECORDS) if service.query("T", f"k{n}", 64, 0, 1 << 62) == [1000 + 100 * n]]
print(json.dumps({"refused_at": refused_at, "found": len(found), "files": len(service.files)}))
"""


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("how", ["numpy", "loop", "put_key"])
def test_a_full_disk_fails_index_puts_with_enospc_and_they_succeed_once_space_is_back(tmp_path, how) -> None:
    with small_disk(tmp_path / "disk", 1 << 20) as disk:
        done = run_child(INDEX_CHILD, str(disk), how)
    assert done.returncode == 0, f"the child exited {done.returncode} (-7 is SIGBUS): {done.stderr[-2000:]}"
    result = json.loads(done.stdout)
    assert result["refused_at"] is not None, "the full disk refused no put: the test did not fill it"
    assert result["refused_at"] > 1, "the keys before the full disk fit in the reserved blocks"
    assert result["found"] == 3000, result  # every key, those refused once included, exactly once
    assert result["files"] == 1, result  # the retry went on in the same file


WHEEL_CHILD = r"""
import errno, sys
from pathlib import Path
from services.scheduler.timer_wheel import TimerWheel
from tests.support.small_disk import fill_disk

disk = Path(sys.argv[1])
fill_disk(disk)
try:
    wheel = TimerWheel(disk / "timerwheel", 86_400, 1000)  # 5.5 MB: more than the disk
except OSError as exc:
    assert exc.errno == errno.ENOSPC, exc
    print("ENOSPC")
else:
    for second in range(0, 86_400, 60):
        wheel.put_slot(second * 1000, 1, 1, 1)
    print("written")
"""


def test_a_timer_wheel_on_a_full_disk_fails_to_open_with_enospc(tmp_path) -> None:
    with small_disk(tmp_path / "disk", 1 << 20) as disk:
        done = run_child(WHEEL_CHILD, str(disk))
    assert done.returncode == 0, f"the child exited {done.returncode} (-7 is SIGBUS): {done.stderr[-2000:]}"
    assert done.stdout.strip() == "ENOSPC"
