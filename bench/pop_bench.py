"""The pop engine's cost with and without its journal (issue 30): a FileStore in this process,
N messages put, then pops of 32 and one ack_many of each batch until all are consumed. Prints
messages per second and CPU-µs per message for each mode.

    python bench/pop_bench.py --messages 100000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.domain.format.commitlog_format import MessageRecord
from services.store.config import FlushMode
from services.store.metadata.config_files import TopicConfig
from services.store.store import FileStore
from tests.support.filestore import small_config

TOPIC, GROUP, QUEUES = "PopBench", "PopBenchGroup", 4


def run(messages: int, journal: bool, flush_mode: FlushMode) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="pop-bench-") as root:
        config = small_config(
            Path(root), flush_mode=flush_mode, pop_journal_enable=journal, commitlog_file_size_bytes=256 << 20
        )
        store = FileStore(config)
        store.start()
        try:
            store.topics.create_or_update(
                TopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            )
            body = b"x" * 1024
            for start in range(0, messages, 256):
                store.put_messages(
                    [
                        MessageRecord(topic=TOPIC, queue_id=i % QUEUES, body=body)
                        for i in range(start, min(messages, start + 256))
                    ]
                )
            store.reput.run_once()
            consumed = 0
            wall, cpu = time.perf_counter(), time.process_time()
            while consumed < messages:
                popped = store.pop.pop(GROUP, TOPIC, -1, 32, 60_000).messages
                if not popped:
                    continue
                store.pop.ack_many(GROUP, TOPIC, [m.receipt_handle for m in popped])
                consumed += len(popped)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            store.shutdown()
    return messages / wall, cpu / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flush", choices=["ASYNC", "SYNC"], default="ASYNC")
    ns = parser.parse_args()
    print(f"pop + ack_many of 32, {ns.messages} messages, {ns.flush} flush, median of {ns.runs} runs")
    print(f"{'journal':8} {'msgs/s':>10} {'CPU-us/msg':>11}")
    for journal in (False, True):
        results = [run(ns.messages, journal, FlushMode[ns.flush]) for _ in range(ns.runs)]
        rate = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        print(f"{'on' if journal else 'off':8} {rate:>10,.0f} {cpu:>11.1f}")


if __name__ == "__main__":
    main()
