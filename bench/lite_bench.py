"""Lite topic benchmark (issue 18): a million lite topics with one message each in one store.

    python bench/lite_bench.py [--lite-topics 1000000] [--batch 32] [--body-bytes 64] [--read 1000]

In process, on the store core (FileStore), with its reput, flush and warm-ahead threads running:
  send      put_batch of ``--batch`` messages, each to a new lite topic of one LITE parent
            (8 queues), timed until dispatch has indexed the last one: sends/s
  memory    the process's resident memory after the sends: anonymous (Python objects) and file
            pages (the mapped CommitLog, ConsumeQueues and lite index, the OS's cache), and the
            lite index's file size per lite topic
  files     files under the store root
  restart   a clean stop and start; a kill (FileStore.halt: threads stop, nothing flushed) and
            start on the same boot (the index is trusted and replayed from its dispatched offset);
            and a start without the lite index (rebuilt from the CommitLog: what a power loss costs)
  read      ``--read`` lite topics picked at random: the time to read each one's unit and record
            (what a receive costs per lite topic, before the pop engine)
Targets (issue 18, this machine): >= 20,000 sends/s into new lite topics, RSS <= 1 GB at 1 M lite
topics, restart <= 30 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.domain.format.commitlog_format import MessageRecord
from services.domain.lite import LITE_TOPIC, lmq_name
from services.domain.statuses import PutStatus
from services.runtime.process import tune_gc
from services.store.config import StoreConfig
from services.store.metadata.config_files import TopicConfig
from services.store.store import FileStore

PARENT = "LiteBench"
QUEUES = 8


def rss_kib() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                fields[name] = int(value.split()[0])
    return fields


def open_store(root: Path) -> tuple[FileStore, float]:
    started = time.perf_counter()
    store = FileStore(StoreConfig(store_root=root, commitlog_file_size_bytes=256 << 20))
    store.start()
    return store, time.perf_counter() - started


def wait_dispatched(store: FileStore) -> None:
    reput = store.reput
    assert reput is not None
    while reput.dispatch_behind_bytes > 0:
        time.sleep(0.001)


def send(store: FileStore, count: int, batch: int, body: bytes) -> float:
    started = time.perf_counter()
    for first in range(0, count, batch):
        records = [
            MessageRecord(
                topic=PARENT,
                queue_id=i % QUEUES,
                body=body,
                properties={LITE_TOPIC: f"session-{i}", "UNIQ_KEY": f"{i:032X}"},
                born_timestamp_ms=1_700_000_000_000,
            )
            for i in range(first, min(first + batch, count))
        ]
        status, error = store.put_batch(records)
        assert status is PutStatus.PUT_OK, (status, error)
    wait_dispatched(store)
    return time.perf_counter() - started


def files_under(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def read_latencies(store: FileStore, count: int, lite_topics: int) -> list[float]:
    picked = random.Random(7).sample(range(lite_topics), min(count, lite_topics))
    out = []
    for i in picked:
        started = time.perf_counter()
        [unit] = store.lite.units(lmq_name(PARENT, f"session-{i}"), 0, 32)
        record = store.commitlog.read_record(unit.phy_offset)
        out.append(time.perf_counter() - started)
        assert record is not None and record.properties[LITE_TOPIC] == f"session-{i}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lite-topics", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--body-bytes", type=int, default=64)
    parser.add_argument("--read", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="store root (default: a temporary directory)")
    parser.add_argument("--open-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.open_only is not None:  # the child of the fresh-process measurement
        store, _ = open_store(args.open_only)
        count = store.lite.queue_count()
        read_latencies(store, 1000, count)
        rss = rss_kib()
        store.shutdown()
        print(
            f"RSS {rss['VmRSS'] / 1024:,.0f} MiB (anon {rss['RssAnon'] / 1024:,.0f} MiB, file {rss['RssFile'] / 1024:,.0f} MiB)"
        )
        return
    tune_gc(StoreConfig.gc_gen0_threshold)
    base = args.dir or Path(tempfile.mkdtemp(prefix="lite-bench-"))
    root = base / "store"
    try:
        store, _ = open_store(root)
        config = TopicConfig(topic_name=PARENT, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        config.message_type = "LITE"
        store.topics.create_or_update(config)
        before = rss_kib()
        elapsed = send(store, args.lite_topics, args.batch, os.urandom(args.body_bytes))
        after = rss_kib()
        count = store.lite.queue_count()
        lite_bytes = (root / "lite" / "data.mdb").stat().st_size
        print(
            f"send     {args.lite_topics:,} new lite topics, batches of {args.batch}: {elapsed:.1f} s, "
            f"{args.lite_topics / elapsed:,.0f} sends/s (indexed: {count:,} lite topics)"
        )
        print(
            f"memory   RSS {after['VmRSS'] / 1024:,.0f} MiB (anon {after['RssAnon'] / 1024:,.0f} MiB, file "
            f"{after['RssFile'] / 1024:,.0f} MiB), +{(after['RssAnon'] - before['RssAnon']) / 1024:,.0f} MiB anon "
            f"over the sends; peak {after['VmHWM'] / 1024:,.0f} MiB"
        )
        print(f"index    lite/data.mdb {lite_bytes / 2**20:,.0f} MiB: {lite_bytes / count:,.0f} bytes per lite topic")
        print(f"files    {files_under(root):,} under the store root")
        reads = read_latencies(store, args.read, args.lite_topics)
        print(
            f"read     {len(reads)} random lite topics: p50 {statistics.median(reads) * 1e6:,.0f} µs, "
            f"p99 {sorted(reads)[int(len(reads) * 0.99) - 1] * 1e6:,.0f} µs"
        )
        store.shutdown()
        store, clean_s = open_store(root)
        print(f"restart  clean stop: start in {clean_s:.2f} s, RSS {rss_kib()['RssAnon'] / 1024:,.0f} MiB anon")
        store.halt()
        store, killed_s = open_store(root)
        assert store.lite.queue_count() == count
        print(f"restart  after a kill (same boot, index trusted): start in {killed_s:.2f} s")
        store.shutdown()
        fresh = subprocess.run(
            [sys.executable, __file__, "--open-only", str(root)], capture_output=True, text=True, check=True
        ).stdout.strip()
        print(f"memory   a fresh process that opens the store and reads 1,000 lite topics: {fresh}")
        shutil.rmtree(root / "lite")
        store, rebuilt_s = open_store(root)
        assert store.lite.queue_count() == count
        print(f"restart  without the lite index (rebuilt from the CommitLog, as after a power loss): {rebuilt_s:.2f} s")
        store.shutdown()
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
