"""Broker benchmark: raw v2 SendMessage, one 1 KiB message per request, through a real broker
and store (two child processes), with 1 and 8 requests in flight.

    python bench/broker_bench.py [--messages N] [--in-flight 1 8] [--runs 3] [--modes coalesced direct]

Prints, per (mode, in-flight): msgs/s, p50 and p99 latency, broker and store CPU-µs per
message, and messages per store PutMessages call (the send coalescing ratio). ``direct`` runs
the broker with ``--no-put-coalescing`` (one PutMessages per message) for comparison. Each
figure is the median of ``--runs`` runs; the load generator is one process, one channel, one
thread per request in flight (as an application using the official client would be).
Targets (performance.md §5.2): 1 in flight >= 800 msg/s, p99 <= 5 ms; 8 in flight >= 1.5 k msg/s,
p99 <= 15 ms.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
from apache.rocketmq.v2 import definition_pb2 as d  # noqa: E402
from apache.rocketmq.v2 import service_pb2 as s  # noqa: E402
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+)")
TOPIC = "BenchTopic"
METADATA = (("x-mq-client-id", "broker-bench@1"),)


def start(args: list[str]) -> tuple[subprocess.Popen, re.Match[str]]:
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = READY.search(line)
    if match is None:
        proc.kill()
        raise SystemExit(f"{args[0]} did not start: {line!r}")
    return proc, match


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def request(body: bytes, i: int) -> s.SendMessageRequest:
    return s.SendMessageRequest(messages=[d.Message(
        topic=d.Resource(name=TOPIC), body=body, system_properties=d.SystemProperties(
            tag="TagA", keys=[f"order-{i}"], message_id=uuid.uuid4().hex.upper(), message_type=d.NORMAL,
            body_encoding=d.IDENTITY, born_host="127.0.0.1"))])


def load(stub: s_grpc.MessagingServiceStub, n: int, in_flight: int, body: bytes) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()

    def caller(k: int) -> None:
        mine = []
        for i in range(k, n, in_flight):
            req = request(body, i)
            started = time.perf_counter()
            response = stub.SendMessage(req, metadata=METADATA, timeout=10)
            mine.append(time.perf_counter() - started)
            if response.status.code != d.OK:
                raise SystemExit(f"send failed: {response.status}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(in_flight)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, sorted(latencies)


def run_mode(mode: str, messages: int, in_flights: list[int], runs: int, body_bytes: int) -> None:
    body = os.urandom(body_bytes)
    for in_flight in in_flights:
        rows = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="broker-bench-") as tmp:
                store, store_ready = start(["services.store", "--data-dir", tmp, "--port", "0", "--metrics-port", "-1"])
                broker_args = ["services.broker", "--port", "0", "--store-address", store_ready["grpc"],
                               "--metrics-port", "0"] + (["--no-put-coalescing"] if mode == "direct" else [])
                broker, broker_ready = start(broker_args)
                try:
                    with grpc.insecure_channel(broker_ready["grpc"]) as channel:
                        stub = s_grpc.MessagingServiceStub(channel)
                        load(stub, 300, in_flight, body)  # warm-up: topic creation, channels, caches
                        calls0 = scrape(broker_ready["metrics"], "pyrmq_broker_store_put_calls_total")
                        cpu0 = proc_cpu_s(broker.pid), proc_cpu_s(store.pid)
                        elapsed, lat = load(stub, messages, in_flight, body)
                        cpu1 = proc_cpu_s(broker.pid), proc_cpu_s(store.pid)
                        calls = scrape(broker_ready["metrics"], "pyrmq_broker_store_put_calls_total") - calls0
                    rows.append((messages / elapsed, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3,
                                 (cpu1[0] - cpu0[0]) / messages * 1e6, (cpu1[1] - cpu0[1]) / messages * 1e6,
                                 messages / calls if calls else 0.0))
                finally:
                    for proc in (broker, store):
                        proc.terminate()
                        proc.wait(30)
        med = [statistics.median(col) for col in zip(*rows)]
        spread = f"[{min(r[0] for r in rows):,.0f}-{max(r[0] for r in rows):,.0f}]"
        print(f"{mode:<9} in_flight={in_flight}  {med[0]:>6,.0f} msgs/s {spread:<13} p50 {med[1]:5.2f} ms  "
              f"p99 {med[2]:5.2f} ms  broker {med[3]:4.0f} CPU-us/msg  store {med[4]:4.0f} CPU-us/msg  "
              f"{med[5]:4.2f} msgs/PutMessages", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--modes", nargs="+", choices=["coalesced", "direct"], default=["coalesced", "direct"])
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.messages} x {args.body_bytes} B "
          f"per run, median of {args.runs}", flush=True)
    for mode in args.modes:
        run_mode(mode, args.messages, args.in_flight, args.runs, args.body_bytes)


if __name__ == "__main__":
    main()
