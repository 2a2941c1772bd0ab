"""Store benchmark: prints msgs/s, MB/s and CPU-seconds per message for the store's hot paths.

    python bench/store_bench.py [--messages N] [--body-bytes 1024] [--only NAME ...] [--pin]

Scenarios (1 KiB bodies, a tag, one KEYS entry and a UNIQ_KEY per message, as an official client
sends a message with a business key; so two IndexFile keys per message):
  append-async   in-process put_batch (the call the store's gRPC servicer makes; put_messages
                 adds a PutResult per message), batches of 32, ASYNC flush, *including*
                 ConsumeQueue dispatch and IndexFile (timed until reput has caught up)
  append-sync    SYNC flush, 32 writer threads putting 1 (and 16) messages per call (group commit)
  read           get_messages by queue, 32 per call
  recover        recovery scan of the CommitLog with CRC checks
  grpc           PutMessages over gRPC to a store process, batches of 100, 4 calls in flight,
                 answered with batch_results (as the broker asks)
  grpc-stream    the same batches over 4 PutMessagesStream calls, one batch in flight on each
                 (the broker's put stream); runs with grpc
Targets (issue 2): 150k / 50k / 300k msgs/s, 200 MB/s, 80k msgs/s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.domain.format.commitlog_format import MessageRecord
from services.domain.statuses import PutStatus
from services.runtime.process import tune_gc
from services.store.config import FlushMode, StoreConfig
from services.store.log.recovery import scan_commitlog
from services.store.store import FileStore

QUEUES = 8
PIN = False  # --pin


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_messages(n: int, body_bytes: int, topic: str = "BenchTopic") -> list[MessageRecord]:
    body = os.urandom(body_bytes)
    return [
        MessageRecord(
            topic=topic,
            queue_id=i % QUEUES,
            body=body,
            properties={"TAGS": "TagA", "KEYS": f"order-{i}", "UNIQ_KEY": uuid.uuid4().hex.upper()},
            born_timestamp_ms=1_700_000_000_000,
        )
        for i in range(n)
    ]


def report(name: str, count: int, seconds: float, cpu: float, nbytes: int, extra: str = "") -> None:
    print(
        f"{name:<14} {count:>9,} msgs  {count / seconds:>10,.0f} msgs/s  {nbytes / seconds / 1e6:>7.1f} MB/s  "
        f"{cpu / count * 1e6:>6.2f} CPU-us/msg  {extra}",
        flush=True,
    )


def store_at(root: Path, **overrides) -> FileStore:
    store = FileStore(StoreConfig(store_root=root, **overrides))
    store.start()
    return store


def bench_append_async(root: Path, n: int, body_bytes: int) -> None:
    store = store_at(root / "async")
    msgs = make_messages(n, body_bytes)
    # As the store process does once started (services/process.tune_gc); the bench's own
    # prepared records are frozen with it, as a store never holds its callers' messages.
    tune_gc(StoreConfig.gc_gen0_threshold)
    batches = [msgs[i : i + 32] for i in range(0, n, 32)]
    c0, t0 = cpu_s(), time.perf_counter()
    for batch in batches:
        status, error = store.put_batch(batch)
        if status is not PutStatus.PUT_OK:
            raise SystemExit(f"put failed: {status.name} {error}")
    while store.reput.dispatch_behind_bytes:
        time.sleep(0.001)
    t1, c1 = time.perf_counter(), cpu_s()
    report("append-async", n, t1 - t0, c1 - c0, store.commitlog.put_bytes_total, "(incl. CQ + index dispatch)")
    store.shutdown()


def bench_append_sync(root: Path, n: int, body_bytes: int, writers: int = 32, per_call: int = 1) -> None:
    store = store_at(root / f"sync{per_call}", flush_mode=FlushMode.SYNC)
    msgs = make_messages(n, body_bytes)
    tune_gc(StoreConfig.gc_gen0_threshold)  # as in bench_append_async
    per = n // writers // per_call * per_call
    failures = []

    def writer(k: int) -> None:
        mine = msgs[k * per : (k + 1) * per]
        for i in range(0, len(mine), per_call):
            batch = mine[i : i + per_call]
            if not all(r.ok for r in store.put_messages(batch)):
                failures.extend(batch)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
    c0, t0 = cpu_s(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1, c1 = time.perf_counter(), cpu_s()
    flushes = store.group_commit.flush_count
    report(
        f"append-sync/{per_call}",
        per * writers,
        t1 - t0,
        c1 - c0,
        store.commitlog.put_bytes_total,
        f"({writers} writers x {per_call} msg/call, {flushes:,} fdatasyncs = "
        f"{per * writers / max(flushes, 1):.0f} msgs/flush, {len(failures)} not OK)",
    )
    store.shutdown()


def bench_read(root: Path, n: int) -> None:
    store = store_at(root / "async")
    total = nbytes = 0
    c0, t0 = cpu_s(), time.perf_counter()
    for q in range(QUEUES):
        offset = 0
        while True:
            got = store.get_messages("BenchTopic", q, offset, max_count=32)
            if not got.raw_messages:
                break
            total += len(got.raw_messages)
            nbytes += sum(map(len, got.raw_messages))
            offset = got.next_begin_offset
    t1, c1 = time.perf_counter(), cpu_s()
    report("read", total, t1 - t0, c1 - c0, nbytes, "(raw records, 32 per call)")
    store.shutdown()


def bench_recover(root: Path) -> None:
    store = FileStore(StoreConfig(store_root=root / "async"))
    store.commitlog.mfq.load()
    c0, t0 = cpu_s(), time.perf_counter()
    end, _, failure = scan_commitlog(store.commitlog, 0, True, True)
    t1, c1 = time.perf_counter(), cpu_s()
    print(
        f"{'recover':<14} {end / 1e6:>9,.0f} MB    {end / (t1 - t0) / 1e6:>10,.0f} MB/s  "
        f"(CRC of body and whole record; {'clean end' if failure is None or 'magic 0x00000000' in failure.reason else failure.reason}; "
        f"{(c1 - c0):.2f} CPU-s)",
        flush=True,
    )
    store.commitlog.close()


WARMUP_CALLS = 20  # PutMessages calls before the clock starts


def bench_grpc(root: Path, n: int, body_bytes: int, in_flight: int = 4, batch: int = 100, stream: bool = False) -> None:
    import grpc
    from pyrmq.store.v1 import store_pb2, store_pb2_grpc

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.store",
            "--data-dir",
            str(root / "grpc"),
            "--port",
            "0",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    if PIN:
        os.sched_setaffinity(proc.pid, {0})
        os.sched_setaffinity(0, {1})
    try:
        line = proc.stdout.readline()
        port = int(line.split("grpc=")[1].split()[0].rsplit(":", 1)[1])
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
        stub = store_pb2_grpc.StoreStub(channel)
        body = os.urandom(body_bytes)
        requests = []
        for b in range(n // batch + WARMUP_CALLS):
            requests.append(
                store_pb2.PutMessagesRequest(
                    messages=[
                        store_pb2.Message(
                            topic="BenchTopic",
                            queue_id=(b * batch + i) % QUEUES,
                            body=body,
                            properties={"TAGS": "TagA", "KEYS": f"order-{b * batch + i}"},
                            born_timestamp_ms=1_700_000_000_000,
                            born_host="127.0.0.1:1",
                        )
                        for i in range(batch)
                    ],
                    batch_results=True,
                )
            )
        # Warm up (connection, HTTP/2 windows, the first segment and IndexFile) outside the timing.
        for req in requests[:WARMUP_CALLS]:
            stub.PutMessages(req, timeout=30)
        requests = requests[WARMUP_CALLS:]
        server_cpu0 = _proc_cpu(proc.pid)
        lock = threading.Lock()
        queue = list(reversed(requests))

        def next_request() -> store_pb2.PutMessagesRequest | None:
            with lock:
                return queue.pop() if queue else None

        def caller() -> None:
            while (req := next_request()) is not None:
                stub.PutMessages(req, timeout=30)

        def stream_caller() -> None:
            # One PutMessagesStream per caller, one batch in flight on it (as the broker uses it).
            answered = threading.Semaphore(1)

            def requests_():
                while True:
                    answered.acquire()
                    req = next_request()
                    if req is None:
                        return
                    yield req

            for resp in stub.PutMessagesStream(requests_(), timeout=300):
                if resp.batch.status != store_pb2.PUT_OK:
                    raise RuntimeError(f"put failed: {resp.batch}")
                answered.release()

        threads = [threading.Thread(target=stream_caller if stream else caller) for _ in range(in_flight)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t1 = time.perf_counter()
        count = len(requests) * batch
        report(
            "grpc-stream" if stream else "grpc",
            count,
            t1 - t0,
            _proc_cpu(proc.pid) - server_cpu0,
            count * (body_bytes + 150),
            f"(batches of {batch}, {in_flight} {'PutMessagesStream' if stream else 'in flight'}, "
            f"batch_results{', pinned' if PIN else ''}; "
            "CPU is the store process's)",
        )
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir on this disk)")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin this process (the in-process store) to CPU 0 and, for grpc, the store "
        "process to CPU 0 and the calling client to CPU 1: a GIL-bound process on "
        "one core is spared cross-core GIL hand-offs (as with a docker cpuset)",
    )
    args = parser.parse_args()
    global PIN
    PIN = args.pin
    if PIN:
        os.sched_setaffinity(0, {0})
    root = Path(args.dir or tempfile.mkdtemp(prefix="pyrmq-bench-", dir=os.environ.get("TMPDIR", "/tmp")))
    want = set(args.only or ["append-async", "append-sync", "read", "recover", "grpc"])
    print(
        f"pyrmq store bench: {args.messages:,} x {args.body_bytes} B, data in {root}"
        f"{' (pinned: --pin)' if PIN else ''}",
        flush=True,
    )
    try:
        if "append-async" in want or "read" in want or "recover" in want:
            bench_append_async(root, args.messages, args.body_bytes)
        if "append-sync" in want:
            # One message per call: every put is a thread wake-up under the GIL. Sixteen per call:
            # what the broker sends when it coalesces concurrent SendMessage calls.
            bench_append_sync(root, min(args.messages, 100_000), args.body_bytes, per_call=1)
            bench_append_sync(root, min(args.messages, 200_000), args.body_bytes, per_call=16)
        if "read" in want:
            bench_read(root, args.messages)
        if "recover" in want:
            bench_recover(root)
        if "grpc" in want:
            bench_grpc(root, min(args.messages, 200_000), args.body_bytes)
        if "grpc-stream" in want or "grpc" in want:
            bench_grpc(root / "stream", min(args.messages, 200_000), args.body_bytes, stream=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
