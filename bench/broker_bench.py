"""Broker benchmark: real broker and store child processes, driven over raw v2 gRPC (and the
official Python client), printing msgs/s, p50/p99 latency and server CPU-µs per message.

    python bench/broker_bench.py [--scenarios send1 send32 consume client] [--messages N] [--runs 3]

Scenarios (the issue's list):

* ``send1``: SendMessage with one 1 KiB message per request, ``--in-flight`` requests at once
  (default 1 and 8; one thread per request in flight on one channel);
* ``send32``: SendMessage with 32 messages per request, ``--send32-in-flight`` requests at once
  (default 1 and 4);
* ``consume``: the topic is filled first, then ReceiveMessage batches of 32 each followed by one
  AckMessage carrying all 32 receipts, ``--consumers`` such loops at once (default 1 and 4);
  latency is one receive+ack round;
* ``client``: the official rocketmq-python-client's blocking ``Producer.send`` in a subprocess
  (its stubs clash with ours): its rate only.

Latency is per request (send32: per 32 messages). CPU is the broker and store processes' user +
system time over the measured run divided by messages. Each figure is the median of ``--runs``
runs, each on a fresh data directory. Targets (issue 3): send1 in flight 1 >= 1,000 msgs/s with
p99 <= 3 ms, in flight 8 >= 2,000 msgs/s; send32 >= 30,000 msgs/s; consume >= 20,000 msgs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.duration_pb2 import Duration

from services.launcher.placement import affinity_environment, plan_for_up

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+)")
TOPIC = "BenchTopic"
GROUP = "BenchGroup"
METADATA = (("x-mq-client-id", "broker-bench@1"),)
SEND_SCRIPT = ROOT / "tests" / "broker" / "clients" / "send.py"


# ``--placement up``: the CPU of each process as ``pyrmq up`` places it by default
# (services/launcher/placement.py); ``env``: as the environment says (PYRMQ_*_CPU_AFFINITY, else any).
PLACEMENT_ENV: dict[str, str] = {}


def start(args: list[str]) -> tuple[subprocess.Popen, re.Match[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **PLACEMENT_ENV},
    )
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


@dataclass
class Cluster:
    store: subprocess.Popen
    broker: subprocess.Popen
    endpoint: str
    cert: Path  # the broker's generated certificate (tls_mode both or tls)

    def cpu_s(self) -> tuple[float, float]:
        return proc_cpu_s(self.broker.pid), proc_cpu_s(self.store.pid)


@contextmanager
def cluster(broker_flags: list[str], data_dir: Path | None = None, store_flags: tuple[str, ...] = ()):
    """A store and a broker process on ``data_dir`` (default: a fresh temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as fresh:
        tmp = str(data_dir or fresh)
        store, store_ready = start(
            ["services.store", "--data-dir", tmp, "--port", "0", "--metrics-port", "-1", *store_flags]
        )
        broker, broker_ready = start(
            [
                "services.broker",
                "--port",
                "0",
                "--store-address",
                store_ready["grpc"],
                "--metrics-port",
                "-1",
                "--auto-create-topic",  # BenchTopic is created by its first route query
                "--data-dir",
                str(Path(tmp) / "broker"),
                *broker_flags,
            ]
        )
        try:
            yield Cluster(store, broker, broker_ready["grpc"], Path(tmp) / "broker" / "tls" / "broker.crt")
        finally:
            for proc in (broker, store):
                proc.terminate()
                proc.wait(30)


def message(body: bytes, i: int) -> d.Message:
    return d.Message(
        topic=d.Resource(name=TOPIC),
        body=body,
        system_properties=d.SystemProperties(
            tag="TagA",
            keys=[f"order-{i}"],
            message_id=uuid.uuid4().hex.upper(),
            message_type=d.NORMAL,
            body_encoding=d.IDENTITY,
            born_host="127.0.0.1",
        ),
    )


def send_load(
    stub: s_grpc.MessagingServiceStub | list[s_grpc.MessagingServiceStub],
    n: int,
    in_flight: int,
    per_request: int,
    body: bytes,
) -> tuple[float, list[float]]:
    """Send ``n`` messages; (elapsed s, sorted request latencies). The requests are built before
    the clock starts, so the client's protobuf work does not compete with the servers'. A list
    of stubs: request thread k sends on stub k (e.g. one connection each)."""
    stubs = stub if isinstance(stub, list) else [stub]
    latencies: list[float] = []
    lock = threading.Lock()
    requests = [
        s.SendMessageRequest(messages=[message(body, r * per_request + j) for j in range(per_request)])
        for r in range(n // per_request)
    ]

    failures: list[str] = []

    def caller(k: int) -> None:
        mine = []
        for request in requests[k::in_flight]:
            if failures:
                return
            started = time.perf_counter()
            try:
                response = stubs[k % len(stubs)].SendMessage(request, metadata=METADATA, timeout=30)
            except grpc.RpcError as e:
                failures.append(f"send failed: {e}")
                return
            mine.append(time.perf_counter() - started)
            if response.status.code != d.OK:
                failures.append(f"send failed: {response.status}")  # raised by the caller: a thread's would be lost
                return
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(in_flight)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(failures[0])
    return time.perf_counter() - started, sorted(latencies)


def consume_load(
    stub: s_grpc.MessagingServiceStub, n: int, consumers: int = 1, broker: str = ""
) -> tuple[float, list[float]]:
    """Receive ``n`` messages in batches of 32, acking each batch in one AckMessage, with
    ``consumers`` receive-and-ack loops at once (a push consumer keeps several receives open);
    ``broker``: from that broker group's queues (message_queue.broker; "": the broker's own)."""
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=GROUP),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1, broker=d.Broker(name=broker)),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=5),
        auto_renew=False,
    )
    latencies: list[float] = []
    got = [0]
    lock = threading.Lock()
    failures: list[str] = []

    def loop() -> None:
        while True:
            with lock:
                if got[0] >= n or failures:
                    return
            begun = time.perf_counter()
            messages = [
                r.message for r in stub.ReceiveMessage(request, metadata=METADATA, timeout=30) if r.HasField("message")
            ]
            if not messages:
                failures.append(f"consume stalled after {got[0]} of {n} messages")
                return
            ack = stub.AckMessage(
                s.AckMessageRequest(
                    group=request.group,
                    topic=d.Resource(name=TOPIC),
                    entries=[
                        s.AckMessageEntry(
                            message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                        )
                        for m in messages
                    ],
                ),
                metadata=METADATA,
                timeout=30,
            )
            if ack.status.code != d.OK:
                failures.append(f"ack failed: {ack.status}")
                return
            with lock:
                latencies.append(time.perf_counter() - begun)
                got[0] += len(messages)

    threads = [threading.Thread(target=loop) for _ in range(consumers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(failures[0])
    return time.perf_counter() - started, sorted(latencies)


@dataclass
class Row:
    rate: float
    p50_ms: float
    p99_ms: float
    broker_us: float
    store_us: float


def measured(c: Cluster, n: int, run: Callable[[], tuple[float, list[float]]]) -> Row:
    cpu0 = c.cpu_s()
    elapsed, lat = run()
    cpu1 = c.cpu_s()
    return Row(
        n / elapsed,
        lat[len(lat) // 2] * 1e3,
        lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        (cpu1[0] - cpu0[0]) / n * 1e6,
        (cpu1[1] - cpu0[1]) / n * 1e6,
    )


def scenario_send(c: Cluster, n: int, in_flight: int, per_request: int, body: bytes) -> Row:
    with grpc.insecure_channel(c.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        send_load(stub, 320, in_flight, per_request, body)  # warm-up: topic creation, channels, caches
        return measured(c, n, lambda: send_load(stub, n, in_flight, per_request, body))


def scenario_consume(c: Cluster, n: int, body: bytes, consumers: int) -> Row:
    with grpc.insecure_channel(c.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        send_load(stub, -(-(n + 320 + 32 * consumers) // 32) * 32, 4, 32, body)  # whole requests of 32
        consume_load(stub, 320)  # warm-up
        return measured(c, n, lambda: consume_load(stub, n, consumers))


def scenario_client(c: Cluster, n: int, body_bytes: int) -> Row:
    job = {
        "endpoint": c.endpoint,
        "topics": [TOPIC],
        "messages": [{"topic": TOPIC, "body_size": body_bytes, "tag": "TagA"} for _ in range(n)],
    }
    with tempfile.TemporaryDirectory(prefix="bench-client-home-") as home:
        cpu0 = c.cpu_s()
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(SEND_SCRIPT), json.dumps(job)],
            capture_output=True,
            text=True,
            env=dict(os.environ, HOME=home),
            timeout=600,
        )
        elapsed = time.perf_counter() - started  # includes the client's start-up and shutdown
        cpu1 = c.cpu_s()
    ok = sum(1 for line in done.stdout.splitlines() if line.startswith('{"ok": true'))
    if ok != n:
        raise SystemExit(f"official client sent {ok} of {n}: {done.stderr[-2000:]}")
    return Row(n / elapsed, 0.0, 0.0, (cpu1[0] - cpu0[0]) / n * 1e6, (cpu1[1] - cpu0[1]) / n * 1e6)


def report(name: str, rows: list[Row]) -> None:
    med = Row(*(statistics.median(getattr(r, f) for r in rows) for f in Row.__dataclass_fields__))
    spread = f"[{min(r.rate for r in rows):,.0f}-{max(r.rate for r in rows):,.0f}]"
    latency = f"p50 {med.p50_ms:6.2f} ms  p99 {med.p99_ms:6.2f} ms" if med.p99_ms else f"{'(latency n/a)':<29}"
    print(
        f"{name:<22} {med.rate:>8,.0f} msgs/s {spread:<17} {latency}  broker {med.broker_us:5.0f} CPU-us/msg  "
        f"store {med.store_us:5.0f} CPU-us/msg",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=["send1", "send32", "consume", "client"],
        default=["send1", "send32", "consume", "client"],
    )
    parser.add_argument("--messages", type=int, default=3000, help="per send1 run (x10 for send32 and consume)")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 8], help="send1 requests in flight")
    parser.add_argument("--send32-in-flight", type=int, nargs="+", default=[1, 4], help="send32 requests in flight")
    parser.add_argument(
        "--consumers", type=int, nargs="+", default=[1, 4], help="consume: receive-and-ack loops at once"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument(
        "--broker-flag",
        action="append",
        default=[],
        help="extra flag for the broker process, e.g. --broker-flag=--no-put-coalescing",
    )
    parser.add_argument(
        "--placement",
        choices=["env", "up"],
        default="env",
        help="env: CPUs as PYRMQ_STORE/BROKER_CPU_AFFINITY say (else any); up: as `pyrmq up` places them by default",
    )
    args = parser.parse_args()
    if args.placement == "up":
        planned = plan_for_up([("store", "store"), ("broker", "broker")], os.environ, "auto")
        for service, cpus in planned.items():
            PLACEMENT_ENV.update(affinity_environment(service, cpus))
        print(f"placement as pyrmq up: {planned}", flush=True)
    body = os.urandom(args.body_bytes)
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.body_bytes} B bodies, "
        f"median of {args.runs} runs",
        flush=True,
    )
    for name in args.scenarios:
        if name == "send1":
            for in_flight in args.in_flight:
                rows = []
                for _ in range(args.runs):
                    with cluster(args.broker_flag) as c:
                        rows.append(scenario_send(c, args.messages, in_flight, 1, body))
                report(f"send1 in_flight={in_flight}", rows)
        elif name == "send32":
            for in_flight in args.send32_in_flight:
                rows = []
                for _ in range(args.runs):
                    with cluster(args.broker_flag) as c:
                        rows.append(scenario_send(c, args.messages * 10, in_flight, 32, body))
                report(f"send32 in_flight={in_flight}", rows)
        elif name == "consume":
            for consumers in args.consumers:
                rows = []
                for _ in range(args.runs):
                    with cluster(args.broker_flag) as c:
                        rows.append(scenario_consume(c, args.messages * 10, body, consumers))
                report(f"consume x{consumers} 32+ack", rows)
        else:
            rows = []
            for _ in range(args.runs):
                with cluster(args.broker_flag) as c:
                    rows.append(scenario_client(c, min(args.messages, 1000), args.body_bytes))
            report("official client send", rows)


if __name__ == "__main__":
    main()
