"""Timer benchmark: schedule N timers (RocketMQ 5 delay messages) and measure the scheduler.

    python bench/timer_bench.py [--timers 1000000] [--start-in-s 90] [--spread-s 120] [--mode prefill]

A store and a scheduler run as child processes (``python -m services.store`` / ``python -m
services.scheduler``), as ``pyrmq up`` runs them. The bench plays the broker: it parks timers
in ``rmq_sys_wheel_timer`` exactly as ``services/broker/producer.py`` does (``TIMER_DELIVER_MS``,
``TIMER_OUT_MS`` rounded to the second, ``REAL_TOPIC``, ``REAL_QID``, ``UNIQ_KEY``), with
delivery times spread uniformly over ``[start + start_in_s, start + start_in_s + spread_s]``.

Modes:
  prefill     park every timer first, then start the scheduler: "scheduling rate" is how fast
              the scheduler moves them into its TimerLog / TimerWheel (its enqueue rate)
  concurrent  start the scheduler first, then park: the rate is end to end (put + enqueue,
              both through the one store process)

``--schedule-only`` (with a far ``--start-in-s``) stops once every timer is scheduled and reports
the scheduler's memory with all of them pending.

Reported: park (put) rate, scheduling rate, the scheduler's resident memory (peak VmHWM and
the last VmRSS), its CPU per timer, and delivery lateness: store timestamp of the delivered
copy minus its TIMER_DELIVER_MS, p50 / p99 / max, plus early / lost / duplicate counts.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.domain.names import TIMER_TOPIC  # noqa: E402
from services.store.client.client import GrpcStoreClient  # noqa: E402
from services.store.client.model import MessageToPut  # noqa: E402

REAL_TOPIC = "TimerBench"
QUEUES = 8
PRECISION_MS = 1000
PUT_BATCH = 512
PUT_THREADS = 2


def start(args: list[str], pattern: str) -> tuple[subprocess.Popen, re.Match]:
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    line = process.stdout.readline()
    match = re.search(pattern, line)
    if match is None:
        process.kill()
        raise SystemExit(f"{args[1]} did not start: {line!r}")
    return process, match


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def timer_out_ms(deliver_ms: int) -> int:
    return deliver_ms - PRECISION_MS if deliver_ms % PRECISION_MS == 0 else deliver_ms // PRECISION_MS * PRECISION_MS


def park(store: GrpcStoreClient, count: int, first_deliver_ms: int, spread_ms: int, body: bytes) -> float:
    """Put ``count`` timers (PUT_THREADS threads); returns the seconds it took."""
    rng = random.Random(7)
    deliver = [first_deliver_ms + rng.randrange(spread_ms) for _ in range(count)]
    started = time.perf_counter()

    def worker(part: int) -> None:
        batch: list[MessageToPut] = []
        for i in range(part, count, PUT_THREADS):
            d = deliver[i]
            batch.append(
                MessageToPut(
                    TIMER_TOPIC,
                    0,
                    body,
                    {
                        "TIMER_DELIVER_MS": str(d),
                        "TIMER_OUT_MS": str(timer_out_ms(d)),
                        "REAL_TOPIC": REAL_TOPIC,
                        "REAL_QID": str(i % QUEUES),
                        "UNIQ_KEY": f"BENCH{i:027d}",
                        "TAGS": "TagA",
                    },
                    born_timestamp_ms=first_deliver_ms,
                )
            )
            if len(batch) == PUT_BATCH:
                store.put_messages(batch, allow_system_topics=True)
                batch = []
        if batch:
            store.put_messages(batch, allow_system_topics=True)

    threads = [threading.Thread(target=worker, args=(part,)) for part in range(PUT_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def read_back(store: GrpcStoreClient) -> tuple[list[int], Counter]:
    lateness, keys = [], Counter()
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            result = store.get_messages(REAL_TOPIC, queue_id, offset, 1024)
            if not result.messages:
                break
            for record in result.messages:
                lateness.append(record.store_timestamp_ms - int(record.properties["TIMER_DELIVER_MS"]))
                keys[record.properties["UNIQ_KEY"]] += 1
            offset = result.next_begin_offset
    return lateness, keys


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timers", type=int, default=1_000_000)
    parser.add_argument("--start-in-s", type=float, default=90.0, help="first delivery this long after the start")
    parser.add_argument("--spread-s", type=float, default=120.0, help="deliveries spread over this long")
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--mode", choices=["prefill", "concurrent"], default="prefill")
    parser.add_argument(
        "--schedule-only",
        action="store_true",
        help="stop after scheduling (memory with every timer pending; use a far --start-in-s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="timer-bench-"))
    store_process, match = start(
        ["-m", "services.store", "--data-dir", str(data_dir), "--port", "0", "--metrics-port", "-1"], r"grpc=(\S+)"
    )
    address = match.group(1)
    client = GrpcStoreClient(address, rpc_timeout_s=60, put_stream=False)
    scheduler_process = None
    try:
        begin_ms = int(time.time() * 1000)
        first_deliver_ms = begin_ms + int(args.start_in_s * 1000)
        body = b"x" * args.body_bytes

        def start_scheduler() -> tuple[subprocess.Popen, str]:
            process, ready = start(
                [
                    "-m",
                    "services.scheduler",
                    "--data-dir",
                    str(data_dir),
                    "--store-address",
                    address,
                    "--port",
                    "0",
                    "--metrics-port",
                    "0",
                ],
                r"metrics=(\S+)",
            )
            return process, ready.group(1)

        if args.mode == "concurrent":
            scheduler_process, metrics_url = start_scheduler()
            scheduling_started, cpu_start = time.perf_counter(), cpu_s(scheduler_process.pid)
        put_s = park(client, args.timers, first_deliver_ms, int(args.spread_s * 1000), body)
        print(
            f"parked    {args.timers:>10,} timers in {put_s:6.1f} s: {args.timers / put_s:>9,.0f} puts/s ({args.mode})",
            flush=True,
        )
        if args.mode == "prefill":
            scheduler_process, metrics_url = start_scheduler()
            scheduling_started, cpu_start = time.perf_counter(), cpu_s(scheduler_process.pid)
        pid = scheduler_process.pid
        peak_rss = 0
        while metric(metrics_url, "pyrmq_scheduler_timer_enqueued_total") < args.timers:
            peak_rss = max(peak_rss, memory_kib(pid)["VmRSS"])
            time.sleep(0.05)
        scheduling_s = time.perf_counter() - scheduling_started
        cpu_scheduled = cpu_s(pid) - cpu_start
        print(
            f"scheduled {args.timers:>10,} timers in {scheduling_s:6.1f} s: {args.timers / scheduling_s:>9,.0f} "
            f"timers/s  (scheduler CPU {cpu_scheduled / args.timers * 1e6:.1f} us/timer)",
            flush=True,
        )
        if args.schedule_only:
            memory = memory_kib(pid)
            pending = metric(metrics_url, "pyrmq_scheduler_timer_pending")
            print(
                f"scheduler memory with {pending:,.0f} timers pending: peak RSS "
                f"{max(peak_rss, memory['VmHWM']) / 1024:.0f} MiB, now {memory['VmRSS'] / 1024:.0f} MiB; "
                f"TimerLog {sum(f.stat().st_blocks * 512 for f in (data_dir / 'scheduler' / 'timerlog').iterdir()) >> 20} "
                f"MiB on disk",
                flush=True,
            )
            return
        behind_s = time.time() - first_deliver_ms / 1000
        if behind_s > 0:
            print(f"warning: scheduling finished {behind_s:.1f} s after the first delivery time; raise --start-in-s")
        deadline = time.time() + args.start_in_s + args.spread_s + 300
        cpu_delivery_start = cpu_s(pid)
        while metric(metrics_url, "pyrmq_scheduler_timer_delivered_total") < args.timers and time.time() < deadline:
            peak_rss = max(peak_rss, memory_kib(pid)["VmRSS"])
            time.sleep(0.5)
        cpu_delivered = cpu_s(pid) - cpu_delivery_start
        memory = memory_kib(pid)
        duplicates = metric(metrics_url, "pyrmq_scheduler_timer_duplicates_total")
        print(
            f"delivered in {time.time() - first_deliver_ms / 1000:6.1f} s from the first due time "
            f"(scheduler CPU {cpu_delivered / args.timers * 1e6:.1f} us/timer)",
            flush=True,
        )
        print(
            f"scheduler memory: peak RSS {max(peak_rss, memory['VmHWM']) / 1024:.0f} MiB "
            f"(VmHWM {memory['VmHWM'] / 1024:.0f} MiB, now {memory['VmRSS'] / 1024:.0f} MiB)",
            flush=True,
        )
        lateness, keys = read_back(client)
        lateness.sort()
        early = sum(1 for value in lateness if value < 0)
        lost = args.timers - len(keys)
        repeated = sum(count - 1 for count in keys.values() if count > 1)
        print(
            f"lateness over {len(lateness):,} deliveries: p50 {percentile(lateness, 0.5)} ms  "
            f"p99 {percentile(lateness, 0.99)} ms  max {lateness[-1]} ms  early {early}  lost {lost}  "
            f"duplicates {repeated} (metric {duplicates:.0f})",
            flush=True,
        )
    finally:
        for process in (scheduler_process, store_process):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        client.close()
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
