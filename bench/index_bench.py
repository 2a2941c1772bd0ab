"""IndexFile build benchmark: keys/s of IndexService.build_index (one call per record) against
build_index_batch (one call per dispatch batch), on the same records, into fresh index dirs with
the default file geometry (5M slots, 20M entries).

    python bench/index_bench.py [--records 200000] [--batch 1 32 256 4096] [--repeat 3]

The per-record code before build_index_batch measured 350-385k keys/s (bench/RESULTS.md,
2026-11-22); it is not kept here, to keep one copy of the put logic.

Each record has a UNIQ_KEY (32 hex chars, random as a UUID's) and KEYS "order-N": two IndexFile
keys per record, as an official client sends a message with one business key. Store timestamps
advance 1 ms every 50 records; phy offsets by 1200 bytes. The best of ``--repeat`` runs is shown,
as wall-clock keys/s and as CPU time per key (steadier on a busy machine).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.domain.format.index_format import HASH_SLOT_NUM_DEFAULT, INDEX_NUM_DEFAULT
from services.runtime.clock import ManualClock
from services.store.index.service import IndexService
from services.store.model import DispatchRequest

TOPIC = "BenchTopic"
T0 = 1_700_000_000_000


def make_requests(n: int) -> list[DispatchRequest]:
    rnd = random.Random(42)
    return [
        DispatchRequest(
            topic=TOPIC,
            queue_id=i % 8,
            phy_offset=1000 + i * 1200,
            size=1200,
            tags_code=0,
            store_timestamp_ms=T0 + i // 50,
            queue_offset=i // 8,
            keys=f"order-{i}",
            uniq_key=f"{rnd.getrandbits(128):032X}",
            sys_flag=0,
            prepared_transaction_offset=0,
        )
        for i in range(n)
    ]


def run(requests: list[DispatchRequest], batch: int | str) -> tuple[float, float]:
    """(wall, CPU) seconds to index ``requests``: per record with ``"one"`` (build_index), else
    with build_index_batch in batches of ``batch``."""
    with tempfile.TemporaryDirectory(prefix="index-bench-") as tmp:
        service = IndexService(Path(tmp) / "index", HASH_SLOT_NUM_DEFAULT, INDEX_NUM_DEFAULT, ManualClock(T0))
        try:
            if batch == "one":
                build = service.build_index
                start, cpu_start = time.perf_counter(), time.process_time()
                for r in requests:
                    build(r.topic, r.keys, r.uniq_key, r.phy_offset, r.store_timestamp_ms, r.sys_flag)
            else:
                chunks = [requests[i : i + batch] for i in range(0, len(requests), batch)]
                build_batch = service.build_index_batch
                start, cpu_start = time.perf_counter(), time.process_time()
                for chunk in chunks:
                    build_batch(chunk)
            elapsed = time.perf_counter() - start, time.process_time() - cpu_start
            assert service.files[-1].entry_count == 2 * len(requests)
        finally:
            service.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32, 256, 4096])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    requests = make_requests(args.records)
    keys = 2 * len(requests)
    print(f"{args.records} records x 2 keys (UNIQ_KEY 32 hex + order-N), best of {args.repeat}")
    modes = [("build_index", "one")]
    modes += [(f"build_index_batch({b})", b) for b in args.batch]
    for label, batch in modes:
        runs = [run(requests, batch) for _ in range(args.repeat)]
        wall = min(w for w, _ in runs)
        cpu = min(c for _, c in runs)
        print(
            f"  {label:<24} {keys / wall:>12,.0f} keys/s  {wall / keys * 1e6:6.2f} us/key"
            f"  (CPU {cpu / keys * 1e6:5.2f} us/key)"
        )


if __name__ == "__main__":
    main()
