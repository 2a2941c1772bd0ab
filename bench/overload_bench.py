"""Overload (issue 7; docs/durability.md, T1.12): offer 3x the sustainable send rate and print
how the broker copes. Prints figures; asserts nothing (bench/, not tests/).

1. Start `pyrmq up` on free ports (its own data directory, removed after).
2. Sustainable rate: SENDERS threads send 1 KiB messages as fast as they can for --measure-s.
3. Overload: --load-factor x that rate, offered by a paced open-loop generator (many threads,
   each on a schedule) for --overload-s; count codes and how long refusals and successes took,
   and sample the broker's and store's RSS every second.
4. Recovery: drop back to the sustainable pace and report the seconds until a full second of
   sends succeeds entirely.

    python bench/overload_bench.py [--measure-s 10] [--overload-s 20] [--load-factor 3] [--no-pin]

On a small machine the Python load generator saturates before the broker does, so by default
(``--pin``, with 2+ CPUs) the servers run on CPU 0 and the generator on the others: the broker
is then the bottleneck, as in production where clients run elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from services.v2client.client import build_message  # noqa: E402

METADATA = (("x-mq-client-id", "overload-bench"),)
BODY = b"x" * 1024
UP_READY = re.compile(r"\(RocketMQ clients: endpoints (\S+)\)")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> dict[str, int]:
    out = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        for name in ("store", "broker"):
            if f"services.{name}" in cmd:
                out[name] = int(child)
    return out


def send(stub: s_grpc.MessagingServiceStub, topic: str) -> tuple[int, float]:
    started = time.monotonic()
    try:
        response = stub.SendMessage(
            s.SendMessageRequest(messages=[build_message(topic, BODY)]), metadata=METADATA, timeout=5
        )
        code = response.status.code
    except grpc.RpcError as exc:
        code = -exc.code().value[0]  # transport failure: negative gRPC code
    return code, time.monotonic() - started


def closed_loop(stub, seconds: float, senders: int) -> tuple[float, int]:
    """(messages/s, sends OK) with ``senders`` threads sending back to back."""
    done = Counter()
    stop = time.monotonic() + seconds

    def run() -> None:
        while time.monotonic() < stop:
            code, _ = send(stub, "OverloadBench")
            done[code == d.OK] += 1

    threads = [threading.Thread(target=run) for _ in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[True] / seconds, done[True]


def _grpc_name(value: int) -> str:
    return next((c.name for c in grpc.StatusCode if c.value[0] == value), str(value))


def stored(endpoint: str, topic: str) -> int:
    """Messages the store holds in ``topic`` (``pyrmq status --json``)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.launcher.cli",
            "status",
            "--endpoint",
            endpoint,
            "--json",
            "--metrics-port",
            "-1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return next(t["max_offset"] for t in json.loads(out)["topics"] if t["name"] == topic)


def open_loop(stub, rate: float, seconds: float, threads: int, results: list) -> None:
    """Offer ``rate`` sends/s for ``seconds`` on a fixed schedule, whatever the answers: each send
    is an asynchronous call (``.future``), so slow answers do not slow the offer down (a thread per
    call in flight would turn this into a closed loop). ``threads`` share the schedule."""
    start = time.monotonic()
    total = int(rate * seconds)
    requests = [s.SendMessageRequest(messages=[build_message("OverloadBench", BODY)]) for _ in range(total)]
    pending = threading.Semaphore(0)
    calls: list = []  # grpc cancels a call whose future is garbage collected: keep them all

    def issue(k: int) -> None:
        for n in range(k, total, threads):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent = time.monotonic()
            call = stub.SendMessage.future(requests[n], metadata=METADATA, timeout=5)
            call.add_done_callback(lambda f, sent=sent: (results.append(outcome(f, sent, start)), pending.release()))
            calls.append(call)

    pool = [threading.Thread(target=issue, args=(k,)) for k in range(threads)]
    start = time.monotonic()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    for _ in range(total):
        pending.acquire()


def outcome(call, sent: float, start: float) -> tuple[float, int, float]:
    now = time.monotonic()
    try:
        code = call.result().status.code
    except grpc.RpcError as exc:
        code = -exc.code().value[0]  # transport failure: negative gRPC code
    return now - start, code, now - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure-s", type=float, default=10)
    parser.add_argument("--overload-s", type=float, default=20)
    parser.add_argument("--recovery-s", type=float, default=15)
    parser.add_argument("--load-factor", type=float, default=3.0)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="open-loop generator threads issuing calls")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=(os.cpu_count() or 1) > 1,
        help="servers on CPU 0, this generator on the other CPUs (default with 2+ CPUs)",
    )
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, generator_cpus = ({cpus[0]}, set(cpus[1:])) if args.pin and len(cpus) > 1 else (set(cpus), set(cpus))
    os.sched_setaffinity(0, generator_cpus)
    print(f"servers on CPUs {sorted(server_cpus)}, generator on CPUs {sorted(generator_cpus)}")
    data = Path(tempfile.mkdtemp(prefix="pyrmq-overload-"))
    up = subprocess.Popen(
        preexec_fn=lambda: os.sched_setaffinity(0, server_cpus),
        args=[
            sys.executable,
            "-m",
            "services.launcher.cli",
            "up",
            "--data-dir",
            str(data),
            "--port",
            "0",
            "--store-port",
            "0",
            "--metrics-port",
            "-1",
            "--broker-metrics-port",
            "-1",
            "--create-topic",
            "OverloadBench",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        endpoint = None
        for line in up.stdout:
            if m := UP_READY.search(line):
                endpoint = m.group(1)
                break
        assert endpoint, "pyrmq up did not start"
        pids = children(up.pid)
        with grpc.insecure_channel(endpoint) as channel:
            stub = s_grpc.MessagingServiceStub(channel)
            acked = int(send(stub, "OverloadBench")[0] == d.OK)
            sustainable, ok = closed_loop(stub, args.measure_s, args.senders)
            acked += ok
            print(f"sustainable (closed loop, {args.senders} senders): {sustainable:,.0f} msgs/s")
            rss_before = {name: rss_mib(pid) for name, pid in pids.items()}
            rss_peak = dict(rss_before)
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.wait(1.0):
                    for name, pid in pids.items():
                        rss_peak[name] = max(rss_peak[name], rss_mib(pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            offered = sustainable * args.load_factor
            results: list = []
            open_loop(stub, offered, args.overload_s, args.threads, results)
            codes = Counter(code for _, code, _ in results)
            total = len(results)
            elapsed = max(at for at, _, _ in results)
            print(
                f"overload: offered {offered:,.0f}/s ({args.load_factor:g}x) for {args.overload_s:g} s -> "
                f"{total:,} sends answered in {elapsed:.1f} s ({total / elapsed:,.0f}/s achieved; a generator "
                f"that falls behind its schedule sends late)"
            )
            for code, count in codes.most_common():
                name = d.Code.Name(code) if code >= 0 else f"gRPC {_grpc_name(-code)}"
                took = sorted(took for _, c, took in results if c == code)
                print(
                    f"  {name}: {count:,} ({100 * count / total:.1f} %), answered in p50 "
                    f"{1000 * statistics.median(took):.1f} ms, p99 {1000 * took[int(len(took) * 0.99)]:.1f} ms"
                )
            print(f"  accepted: {codes[d.OK] / elapsed:,.0f} msgs/s")
            refused = codes[d.TOO_MANY_REQUESTS] + codes[-grpc.StatusCode.UNAVAILABLE.value[0]]
            timeouts = codes[-grpc.StatusCode.DEADLINE_EXCEEDED.value[0]]
            print(
                f"  refused (TOO_MANY_REQUESTS, or UNAVAILABLE = HTTP/2 REFUSED_STREAM, never processed): "
                f"{refused:,}; timed out: {timeouts:,}; other: {total - codes[d.OK] - refused - timeouts:,}"
            )
            sampling.set()
            print(
                "  RSS MiB (before -> peak): "
                + ", ".join(f"{name} {rss_before[name]:.0f} -> {rss_peak[name]:.0f}" for name in pids)
            )
            recovery: list = []
            open_loop(stub, sustainable * 0.8, args.recovery_s, args.threads, recovery)
            by_second: dict[int, Counter] = {}
            for at, code, _ in recovery:
                by_second.setdefault(int(at), Counter())[code == d.OK] += 1
            clean = next((sec for sec in sorted(by_second) if by_second[sec][False] == 0), None)
            acked += codes[d.OK] + sum(1 for _, code, _ in recovery if code == d.OK)
            held = stored(endpoint, "OverloadBench")
            print(
                f"stored {held:,} messages; sends answered OK {acked:,}: {held - acked:,} stored without an OK "
                f"(refused or cancelled sends that were stored anyway; 0 expected)"
            )
            print(
                f"recovery at 0.8x: first second with every send OK: {clean} s after the load dropped "
                f"({'within' if clean is not None and clean <= 10 else 'NOT within'} 10 s)"
            )
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
