"""pyrmq's remoting door against NATS JetStream in the same run, and the door's CPU per request
against grpcio's unary floor (issue 29, "Figures").

    python bench/remoting_bench.py [--scenarios send1 batch pull door] [--messages 2000] [--runs 3]
                                   [--nats-ack explicit all] [--seconds 5] [--window 64]

Needs ``make bench-deps`` (nats-py, nats-server >= 2.10, py-spy for ``--profile``); exits 2
without them. The servers are compare_nats.py's: a fresh ``pyrmq up`` (defaults: ASYNC flush,
store and broker pinned apart, TLS front on the gRPC port; remoting on a free port) and a fresh
``nats-server`` (JetStream file store, one stream) per run, alternating pyrmq, NATS. The load
generator is this process: an asyncio (uvloop) client that pipelines RemotingCommand frames on
one connection, as the Java client multiplexes its requests on one channel per broker.

Scenarios (1 KiB bodies; each message has TAGS, one KEYS entry, UNIQ_KEY and WAIT=true, as the
Java producer sends them):

* ``send1``: SEND_MESSAGE_V2, one in flight, queues round-robin, after 200 warm-up sends; vs
  nats-py ``await js.publish`` (compare_nats' ``sync``);
* ``batch``: SEND_BATCH_MESSAGE of 32 (header ``m=true``, the batch's own UNIQ_KEY and WAIT),
  4 in flight, 10 x ``--messages``; vs 4 tasks each ``js.publish_async`` 32 then awaiting their
  acks (128 in flight); latency per batch;
* ``pull``: a backlog of 10 x ``--messages`` over 8 queues written first (batches, waited for
  until GET_MAX_OFFSET shows it all), then a consumer as the Java push consumer: HEART_BEAT with
  its subscription, QUERY_CONSUMER_OFFSET per queue, one PULL_MESSAGE of 32 in flight per queue
  (sysFlag SUSPEND, COMMIT_OFFSET with the queue's consumed offset once above 0, no
  SUBSCRIPTION bit: the broker's registered one) and UPDATE_CONSUMER_OFFSET oneway for every
  queue every 5 s and at the end; 64 messages per queue of warm-up first. NATS: the same
  backlog over 8 subjects, 8 durable pull consumers (one per subject), each ``fetch(32)`` in
  a loop with acks: ``--nats-ack explicit`` (compare_nats' consume: ``msg.ack()`` per message)
  or ``all`` (AckPolicy.ALL, one ack of the batch's last message: the same work as an offset
  commit); latency per pull;
* ``door``: one pyrmq cluster; broker CPU per request for trivial requests over each door, at
  one in flight and ``--window`` in flight: grpcio's unary floor (``grpc.health.v1`` Check,
  through the TLS front as every v2 client) against the remoting door's GET_KV_CONFIG (answered
  on the loop, no store call); and the same work through both: v2 QueryOffset END against
  GET_MAX_OFFSET (both: check the queue, one store call). Aim: the remoting door at a quarter
  of grpcio's CPU or less.

CPU: user + system time of each server process over the measured part (/proc/<pid>/stat), per
message (per request for ``door``), and in brackets this process's (the load generator shares
the 2 cores). Figures are medians of ``--runs``; pairs run pyrmq first, then NATS first, and so
on; the ratio pyrmq/NATS is taken per pair, then the median. Targets (issue 29): pull >= 1.5x,
batch >= 1.0x, send1 >= 0.5x NATS. ``--pull-commit none``: pulls without the COMMIT_OFFSET bit
(offsets only by the 5 s oneway), to see what a commit per pull costs. Where the broker's CPU
goes: bench/remoting_profile.py. ``--client-cpu 0``: the load generator on CPU 0 (the store's;
``pyrmq up`` puts the broker on CPU 1), so it never shares the broker's CPU: at one in flight the
door's figures are bimodal without it (~35 or ~55 CPU-µs per GET_KV_CONFIG, by where the client
runs). Ends with markdown for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import compare_nats as cn
import grpc
import uvloop
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from broker_bench import METADATA
from grpc_health.v1 import health_pb2, health_pb2_grpc
from remoting_client import (
    BATCHES_IN_FLIGHT,
    PER_BATCH,
    TOPIC,
    Connection,
    Producer,
    PullConsumer,
    route,
    send_batches,
    wait_backlog,
)

from services.domain.remoting.codes import RequestCode

try:
    from nats.js.api import AckPolicy, ConsumerConfig
except ImportError:  # main() exits 2 without nats-py (compare_nats.nats is None)
    pass

SCENARIOS = ["send1", "batch", "pull", "door"]
TARGETS = {"send1": 0.5, "batch": 1.0, "pull": 1.5}
PULL_COMMIT = True  # --pull-commit
QUEUES, PULL_WARM = 8, 64  # the topic's queues (pyrmq topic create's default); warm-up messages per queue


# ---------------------------------------------------------------- figures


@dataclass
class Figures:
    rate: float
    p50_ms: float
    p99_ms: float
    cpu_us: dict[str, float]  # role -> CPU-µs per message; "client": this process (the load generator)

    @property
    def total_us(self) -> float:
        """The servers' CPU-µs per message."""
        return sum(us for role, us in self.cpu_us.items() if role != "client")


class Meter:
    """CPU of each server process over the measured part, and the wall time."""

    def __init__(self, srv: cn.Server) -> None:
        self.srv = srv
        self.cpu0 = self.cpu()
        self.started = time.perf_counter()

    def cpu(self) -> dict[str, float]:
        return {**self.srv.cpu_by_role(), "client": time.process_time()}

    def figures(self, n: int, latencies: list[float]) -> Figures:
        elapsed = time.perf_counter() - self.started
        cpu1 = self.cpu()
        lat = sorted(latencies) or [0.0]
        return Figures(
            n / elapsed,
            lat[len(lat) // 2] * 1e3,
            lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
            {role: (cpu1[role] - self.cpu0[role]) / n * 1e6 for role in cpu1},
        )


class Hooks:
    """Called around each pyrmq scenario's measured part: bench/remoting_profile.py samples there."""

    def start(self, srv: cn.Server, name: str) -> None:
        pass

    def stop(self) -> None:
        pass


HOOKS = Hooks()


# ---------------------------------------------------------------- pyrmq scenarios


async def pyrmq_send1(srv: cn.Server, n: int, body: bytes) -> Figures:
    conn = await Connection.open(srv.remoting)
    producer = Producer(conn, *await route(conn))
    for i in range(200):
        await producer.send(i % producer.queues, body)
    latencies = []
    HOOKS.start(srv, "send1")
    meter = Meter(srv)
    for i in range(n):
        begun = time.perf_counter()
        response = await producer.send(i % producer.queues, body)
        latencies.append(time.perf_counter() - begun)
        if response.code != 0:
            raise SystemExit(f"send answered {response.code}: {response.remark}")
    figures = meter.figures(n, latencies)
    HOOKS.stop()
    conn.close()
    return figures


async def pyrmq_batch(srv: cn.Server, n: int, body: bytes) -> Figures:
    conn = await Connection.open(srv.remoting)
    producer = Producer(conn, *await route(conn))
    await send_batches(producer, 20 * PER_BATCH, body)
    latencies: list[float] = []
    HOOKS.start(srv, "batch")
    meter = Meter(srv)
    await send_batches(producer, n, body, latencies)
    figures = meter.figures(n, latencies)
    HOOKS.stop()
    conn.close()
    return figures


async def pyrmq_pull(srv: cn.Server, n: int, body: bytes) -> Figures:
    conn = await Connection.open(srv.remoting)
    broker_name, queues = await route(conn)
    per_queue = n // queues
    await send_batches(Producer(conn, broker_name, queues), n + PULL_WARM * queues, body)
    await wait_backlog(conn, queues, per_queue + PULL_WARM)
    consumer = PullConsumer(conn, broker_name, queues, PULL_COMMIT)
    await consumer.start()
    await consumer.consume(PULL_WARM)
    latencies: list[float] = []
    HOOKS.start(srv, "pull")
    meter = Meter(srv)
    got = await consumer.consume(per_queue, latencies)
    figures = meter.figures(got, latencies)
    HOOKS.stop()
    conn.close()
    return figures


# ---------------------------------------------------------------- NATS scenarios


async def nats_send1(srv: cn.Server, n: int, body: bytes, _ack: str) -> Figures:
    """compare_nats' sync (200 warm-up, then ``await js.publish``), with the client's CPU."""
    nc, js = await cn.js_open(srv)
    try:
        for _ in range(200):
            await js.publish("bench.s", body)
        latencies = []
        meter = Meter(srv)
        for _ in range(n):
            begun = time.perf_counter()
            await js.publish("bench.s", body)
            latencies.append(time.perf_counter() - begun)
        return meter.figures(n, latencies)
    finally:
        await nc.close()


async def js_batches(js: Any, subjects: list[str], n: int, body: bytes, latencies: list[float] | None = None) -> None:
    """``n`` messages as 4 tasks each publishing 32 at once and awaiting their acks."""
    batches = iter(range(n // PER_BATCH))

    async def worker() -> None:
        for i in batches:
            begun = time.perf_counter()
            subject = subjects[i % len(subjects)]
            await asyncio.gather(*[await js.publish_async(subject, body) for _ in range(PER_BATCH)])
            if latencies is not None:
                latencies.append(time.perf_counter() - begun)

    await asyncio.gather(*(worker() for _ in range(BATCHES_IN_FLIGHT)))


async def nats_batch(srv: cn.Server, n: int, body: bytes, _ack: str) -> Figures:
    nc, js = await cn.js_open(srv)
    try:
        await js_batches(js, ["bench.w"], 20 * PER_BATCH, body)
        latencies: list[float] = []
        meter = Meter(srv)
        await js_batches(js, ["bench.b"], n, body, latencies)
        return meter.figures(n, latencies)
    finally:
        await nc.close()


async def nats_pull(srv: cn.Server, n: int, body: bytes, ack: str) -> Figures:
    nc, js = await cn.js_open(srv)
    try:
        subjects = [f"bench.q.{q}" for q in range(QUEUES)]
        per_queue = n // QUEUES
        await js_batches(js, subjects, n + PULL_WARM * QUEUES, body)
        policy = AckPolicy.ALL if ack == "all" else AckPolicy.EXPLICIT
        subs = [
            await js.pull_subscribe(
                subject, durable=f"q{q}", config=ConsumerConfig(ack_policy=policy, max_ack_pending=100_000)
            )
            for q, subject in enumerate(subjects)
        ]

        async def consume(count: int, latencies: list[float] | None) -> int:
            async def loop(sub: Any) -> int:
                got = 0
                while got < count:
                    begun = time.perf_counter()
                    messages = await sub.fetch(PER_BATCH, timeout=10)
                    if latencies is not None:
                        latencies.append(time.perf_counter() - begun)
                    if ack == "all":
                        await messages[-1].ack()
                    else:
                        for m in messages:
                            await m.ack()
                    got += len(messages)
                return got

            total = sum(await asyncio.gather(*(loop(sub) for sub in subs)))
            await nc.flush()
            return total

        await consume(PULL_WARM, None)
        latencies: list[float] = []
        meter = Meter(srv)
        got = await consume(per_queue, latencies)
        return meter.figures(got, latencies)
    finally:
        await nc.close()


# ---------------------------------------------------------------- door: CPU per request


def grpc_window(call: Any, request: Any, n: int, window: int) -> None:
    """``n`` unary calls, ``window`` in flight (futures); raises on the first failure."""
    if window == 1:
        for _ in range(n):
            call(request, metadata=METADATA, timeout=10)
        return
    slots = threading.Semaphore(window)
    done = threading.Event()
    finished = [0]
    failures: list[BaseException] = []
    lock = threading.Lock()

    def completed(future: Any) -> None:
        if future.exception() is not None:
            failures.append(future.exception())
        slots.release()
        with lock:
            finished[0] += 1
            if finished[0] == n:
                done.set()

    for _ in range(n):
        slots.acquire()
        call.future(request, metadata=METADATA, timeout=10).add_done_callback(completed)
    done.wait()
    if failures:
        raise SystemExit(f"gRPC call failed: {failures[0]}")


async def remoting_window(conn: Connection, code: int, fields: dict[str, str], n: int, window: int) -> None:
    counter = iter(range(n))

    async def worker() -> None:
        for _ in counter:
            response = await conn.request(code, fields)
            if code == RequestCode.GET_MAX_OFFSET and response.code != 0:
                raise SystemExit(f"GET_MAX_OFFSET answered {response.code}: {response.remark}")

    await asyncio.gather(*(worker() for _ in range(window)))


def door_cases(srv: cn.Server, window: int) -> tuple[grpc.Channel, list[tuple[str, Callable[[int, int], None]]]]:
    """(name, run(n, window)) for each door case."""
    channel = grpc.insecure_channel(srv.endpoint)
    health = health_pb2_grpc.HealthStub(channel).Check
    query = s_grpc.MessagingServiceStub(channel).QueryOffset
    check = health_pb2.HealthCheckRequest(service="")
    offset = s.QueryOffsetRequest(
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=0), query_offset_policy=d.QueryOffsetPolicy.END
    )
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC}
    max_offset = {"topic": TOPIC, "queueId": "0"}

    def remoting(code: int, fields: dict[str, str]) -> Callable[[int, int], None]:
        async def go(n: int, w: int) -> None:
            conn = await Connection.open(srv.remoting)
            try:
                await remoting_window(conn, code, fields, n, w)
            finally:
                conn.close()

        return lambda n, w: uvloop.run(go(n, w))

    return channel, [
        ("grpc health Check", lambda n, w: grpc_window(health, check, n, w)),
        ("remoting GET_KV_CONFIG (inline)", remoting(RequestCode.GET_KV_CONFIG, kv)),
        ("grpc v2 QueryOffset END", lambda n, w: grpc_window(query, offset, n, w)),
        ("remoting GET_MAX_OFFSET (pool + store)", remoting(RequestCode.GET_MAX_OFFSET, max_offset)),
    ]


def door_rate(go: Callable[[int, int], None], window: int, seconds: float) -> int:
    """Requests for about ``seconds`` of this case (CPU is read in 10 ms ticks)."""
    probe = 200 if window == 1 else 2000
    started = time.perf_counter()
    go(probe, window)
    return max(probe, int(probe / (time.perf_counter() - started) * seconds))


def run_door(durability: str, runs: int, seconds: float, window: int) -> list[str]:
    """Broker CPU per request of each door case; the remoting/grpcio ratio per run, then the median."""
    results: dict[tuple[str, int], list[tuple[float, float]]] = collections.defaultdict(list)
    for run in range(runs):
        with cn.pyrmq_cluster(durability) as srv:
            channel, cases = door_cases(srv, window)
            with channel:
                for _name, go in cases:
                    go(500, 1)  # warm-up
                order = [(name, go, w) for name, go in cases for w in (1, window)]
                for name, go, w in order if run % 2 == 0 else order[::-1]:
                    count = door_rate(go, w, seconds)
                    broker0, started = srv.cpu_by_role()["broker"], time.perf_counter()
                    go(count, w)
                    elapsed = time.perf_counter() - started
                    cpu_us = (srv.cpu_by_role()["broker"] - broker0) / count * 1e6
                    results[(name, w)].append((count / elapsed, cpu_us))
                    print(
                        f"  door run {run + 1}: {name}, {w} in flight: {count:,} requests, {count / elapsed:,.0f}/s, "
                        f"broker {cpu_us:.1f} CPU-µs/request",
                        flush=True,
                    )
    table = [
        "| request | in flight | requests/s | broker CPU-µs/request (each run) | remoting/grpcio (each run) |",
        "|---|---|---|---|---|",
    ]
    for (name, w), figures in results.items():
        cpus = [c for _, c in figures]
        ratio = ""
        if name.startswith("remoting"):
            base = results["grpc health Check" if "GET_KV" in name else "grpc v2 QueryOffset END", w]
            each = [c / b for c, (_, b) in zip(cpus, base)]
            ratio = f"{statistics.median(each):.2f}× ({', '.join(f'{r:.2f}' for r in each)})"
        table.append(
            f"| {name} | {w} | {statistics.median(r for r, _ in figures):,.0f} | {statistics.median(cpus):.1f} "
            f"({', '.join(f'{c:.1f}' for c in cpus)}) | {ratio} |"
        )
    return table


# ---------------------------------------------------------------- driver


def run_pairs(scenario: str, durability: str, n: int, runs: int, body: bytes, binary: str, ack: str) -> list[str]:
    pairs: list[tuple[Figures, Figures]] = []
    for run in range(runs):

        def pyrmq() -> Figures:
            with cn.pyrmq_cluster(durability) as srv:
                return uvloop.run(globals()[f"pyrmq_{scenario}"](srv, n, body))

        def nats() -> Figures:
            with cn.nats_server(binary, durability) as srv:
                return uvloop.run(globals()[f"nats_{scenario}"](srv, n, body, ack))

        if run % 2 == 0:  # A B, then B A: the second of a pair tends to run slower here
            a = pyrmq()
            b = nats()
        else:
            b = nats()
            a = pyrmq()
        pairs.append((a, b))
        print(f"  {scenario}/{durability} run {run + 1}: pyrmq {text(a)} | nats {text(b)}", flush=True)
    pa = median_figures([a for a, _ in pairs])
    pb = median_figures([b for _, b in pairs])
    each = [a.rate / b.rate for a, b in pairs]
    ratio = statistics.median(each)
    target = TARGETS[scenario]
    verdict = f"≥ {target}× {'✓' if ratio >= target else '✗'}"
    print(f"{scenario} ({n:,} msgs) pyrmq {text(pa)} | nats {text(pb)} | {ratio:.2f}× {verdict}", flush=True)
    label = f"{scenario} ({n:,} msgs)" + (f", NATS acks {ack}" if scenario == "pull" else "")
    return [
        f"| {label} | {pa.rate:,.0f} | {pa.p50_ms:.2f} / {pa.p99_ms:.2f} | {pa.cpu_us['broker']:,.1f} + "
        f"{pa.cpu_us['store']:,.1f} ({pa.cpu_us['client']:,.1f}) | {pb.rate:,.0f} | {pb.p50_ms:.2f} / {pb.p99_ms:.2f} | "
        f"{pb.total_us:,.1f} ({pb.cpu_us['client']:,.1f}) | {ratio:.2f}× ({', '.join(f'{r:.2f}' for r in each)}) | "
        f"{verdict} |"
    ]


def text(f: Figures) -> str:
    cpu = " + ".join(f"{role} {us:,.1f}" for role, us in f.cpu_us.items())
    return f"{f.rate:>8,.0f}/s p50 {f.p50_ms:6.2f} p99 {f.p99_ms:6.2f} ms CPU-µs/msg {cpu}"


def median_figures(rows: list[Figures]) -> Figures:
    roles = rows[0].cpu_us
    return Figures(
        statistics.median(r.rate for r in rows),
        statistics.median(r.p50_ms for r in rows),
        statistics.median(r.p99_ms for r in rows),
        {role: statistics.median(r.cpu_us[role] for r in rows) for role in roles},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=SCENARIOS)
    parser.add_argument("--durability", choices=["async", "sync"], default="async", help="as compare_nats")
    parser.add_argument("--messages", type=int, default=2000, help="send1; x10 for batch and pull")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nats-ack", nargs="+", choices=["explicit", "all"], default=["explicit"])
    parser.add_argument("--seconds", type=float, default=5.0, help="door: measured time per case and run")
    parser.add_argument("--window", type=int, default=64, help="door: requests in flight")
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--pull-commit", choices=["pull", "none"], default="pull", help="see above")
    parser.add_argument("--client-cpu", type=int, default=-1, help="pin this process (the load) to a CPU; -1: not")
    parser.add_argument("--nats-server", help="nats-server binary (default: beside this Python, else PATH)")
    args = parser.parse_args()
    global PULL_COMMIT
    PULL_COMMIT = args.pull_commit == "pull"
    if args.client_cpu >= 0:
        os.sched_setaffinity(0, {args.client_cpu})
    binary = cn.find_nats_server(args.nats_server)
    if getattr(cn, "nats", None) is None or binary is None:
        print("nats-py or nats-server >= 2.10 not found: run `make bench-deps`", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    body = os.urandom(args.body_bytes)
    many = max(PER_BATCH * QUEUES, args.messages * 10 // (PER_BATCH * QUEUES) * PER_BATCH * QUEUES)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {version}, nats-py "
        f"{importlib.metadata.version('nats-py')}; {args.body_bytes} B bodies; {args.runs} A-B pairs (pyrmq first, then NATS first, ...)",
        flush=True,
    )
    table: list[str] = []
    door: list[str] = []
    try:
        for scenario in args.scenarios:
            if scenario == "door":
                door = run_door(args.durability, args.runs, args.seconds, args.window)
                continue
            n = args.messages if scenario == "send1" else many
            for ack in args.nats_ack if scenario == "pull" else ["explicit"]:
                table += run_pairs(scenario, args.durability, n, args.runs, body, binary, ack)
    except KeyboardInterrupt:
        print("interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if table:
        print(
            "| scenario | pyrmq msgs/s | pyrmq p50 / p99 ms | pyrmq CPU-µs/msg: broker + store (client) | NATS msgs/s | "
            "NATS p50 / p99 ms | NATS CPU-µs/msg: server (client) | pyrmq/NATS, median of pairs (each) | target |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(table))
    if door:
        print("\n" + "\n".join(door))


if __name__ == "__main__":
    main()
