"""Replication benchmark (issue 16): what a replica set costs and how fast it fails over.

    python bench/replication_bench.py [--messages N] [--runs R] [--kills K] [--only NAME ...]

Stores run as child processes (``python -m services.store``, PYRMQ_STORE_* variables) on
127.0.0.1, with a local etcd member (``python -m services.launcher.etcd_local``, Debian's etcd) for the
replica sets; 1 KiB bodies, a tag and a KEYS entry per message.

Scenarios:
  throughput  pipelined PutMessages over gRPC (batches of --batch, --in-flight calls in flight,
              batch_results, as store_bench's grpc mode) to a SYNC_MASTER with one slave in
              controller mode (all_ack_in_sync_state_set: a put returns once the slave has it),
              against the same store alone (no etcd, no replication); both SYNC flush
              (--replicated-flush ASYNC: the master flushes asynchronously, RocketMQ's usual
              SYNC_MASTER + ASYNC_FLUSH). --runs pairs in one run, the order alternating (A B, B A,
              ...); prints each rate and the ratio replicated / alone (target >= 0.6).
  lag         the replicated pair under a steady load (--lag-rate msgs/s for --lag-seconds):
              the slave's lag as its master's GetReplicaStatus reports it from the HA session
              (bytes = master max phy_offset - slave confirmed offset; ms = age of the oldest
              unconfirmed byte; store timestamps are whole ms, so a batch appended within the
              same ms reads 0), sampled every 50 ms: p50, p99, max. Under SYNC all-ack the
              bytes are what is in flight: a batch appended and not yet confirmed.
  failover    the pair (lease_ttl_ms 2000) under a trickle of single-message puts (one every
              --trickle-ms) from a GrpcStoreClient following the master through etcd; the
              master is killed with SIGKILL (once both replicas are in the SyncStateSet) and the
              time from the kill to the first put answered OK by the new master is measured,
              --kills times (the killed replica is restarted and rejoins as a slave before the
              next kill): p50, p99 (target p99 <= 5 s with 2 s leases), puts not OK.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from pyrmq.store.v1 import store_pb2, store_pb2_grpc

from services.runtime.process import free_ports
from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreError
from services.store.client.model import MessageToPut, PutStatus

QUEUES = 8
TOPIC = "BenchTopic"
READY_TIMEOUT_S = 60.0
LEASE_TTL_MS = 2000
WARMUP_CALLS = 20  # PutMessages calls before the clock starts


def read_ready(proc: subprocess.Popen[str], name: str) -> dict[str, str]:
    """The key=value pairs of a pyrmq service's ready line (``pyrmq-<name> ready k=v ...``)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"pyrmq-{name} exited {proc.wait()} before its ready line")
        if line.startswith(f"pyrmq-{name} ready "):
            return dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
    raise SystemExit(f"pyrmq-{name}: no ready line in {READY_TIMEOUT_S:.0f} s")


def start_child(module: str, name: str, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", module],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=log.open("ab"),
        text=True,
    )
    ready = read_ready(proc, name)
    threading.Thread(target=lambda: proc.stdout and proc.stdout.read(), daemon=True).start()  # drain
    return proc, ready


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Etcd:
    root: Path
    proc: subprocess.Popen[str] | None = None
    endpoint: str = ""

    def __enter__(self) -> Etcd:
        port = free_ports(1)[0]
        peer = free_ports(1)[0]
        self.proc, ready = start_child(
            "services.launcher.etcd_local",
            "etcd",
            {"PYRMQ_ETCD_DATA_DIR": str(self.root), "PYRMQ_ETCD_PORT": str(port), "PYRMQ_ETCD_PEER_PORT": str(peer)},
            self.root.parent / "etcd.log",
        )
        self.endpoint = ready["grpc"]
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            stop(self.proc)


@dataclass
class StoreProc:
    """One store process; ``start`` again after a kill: the same data, port and replica id."""

    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=lambda: free_ports(1)[0])
    proc: subprocess.Popen[str] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> StoreProc:
        env = {
            "PYRMQ_STORE_DATA_DIR": str(self.data_dir),
            "PYRMQ_STORE_HOST": "127.0.0.1",
            "PYRMQ_STORE_PORT": str(self.port),
            "PYRMQ_STORE_METRICS_PORT": "-1",
            **self.env,
        }
        self.proc, _ = start_child("services.store", "store", env, self.data_dir.parent / f"{self.data_dir.name}.log")
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


def replica_set(root: Path, etcd: Etcd, group: str, count: int, flush: str) -> list[StoreProc]:
    """``count`` replicas of ``group`` in controller mode, SYNC_MASTER (all-ack), started."""
    replicas = []
    for replica_id in range(count):
        env = {
            "PYRMQ_STORE_FLUSH_MODE": flush,
            "PYRMQ_STORE_ETCD_ENDPOINTS": etcd.endpoint,
            "PYRMQ_STORE_BROKER_NAME": group,
            "PYRMQ_STORE_REPLICA_ID": str(replica_id),
            "PYRMQ_STORE_BROKER_ROLE": "SYNC_MASTER",
            "PYRMQ_STORE_LEASE_TTL_MS": str(LEASE_TTL_MS),
        }
        replicas.append(StoreProc(root / f"{group}-{replica_id}", env).start())
    return replicas


def replica_status(address: str) -> store_pb2.GetReplicaStatusResponse | None:
    try:
        with grpc.insecure_channel(address) as channel:
            return store_pb2_grpc.StoreStub(channel).GetReplicaStatus(store_pb2.GetReplicaStatusRequest(), timeout=5)
    except grpc.RpcError:
        return None


def wait_in_sync(replicas: list[StoreProc], timeout_s: float = 60.0) -> StoreProc:
    """The master, once every replica is in its SyncStateSet."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for replica in replicas:
            status = replica_status(replica.address)
            if status is not None and status.master_address == replica.address:
                if len(status.sync_state_set) == len(replicas):
                    return replica
        time.sleep(0.1)
    raise SystemExit(f"the replica set did not come in sync in {timeout_s:.0f} s")


def requests(count: int, batch: int, body: bytes, start: int = 0) -> list[store_pb2.PutMessagesRequest]:
    return [
        store_pb2.PutMessagesRequest(
            messages=[
                store_pb2.Message(
                    topic=TOPIC,
                    queue_id=(b * batch + i) % QUEUES,
                    body=body,
                    properties={"TAGS": "TagA", "KEYS": f"order-{start + b * batch + i}"},
                    born_timestamp_ms=1_700_000_000_000,
                    born_host="127.0.0.1:1",
                )
                for i in range(batch)
            ],
            batch_results=True,
        )
        for b in range(count)
    ]


def pipelined(address: str, n: int, batch: int, in_flight: int, body_bytes: int) -> float:
    """msgs/s of ``n`` messages as PutMessages batches, ``in_flight`` calls at a time."""
    body = os.urandom(body_bytes)
    reqs = requests(n // batch + WARMUP_CALLS, batch, body)
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        for req in reqs[:WARMUP_CALLS]:  # connection, first segment, IndexFile: outside the timing
            stub.PutMessages(req, timeout=30)
        queue = list(reversed(reqs[WARMUP_CALLS:]))
        lock = threading.Lock()
        failed: list[str] = []

        def caller() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    req = queue.pop()
                reply = stub.PutMessages(req, timeout=60)
                if reply.batch.status != store_pb2.PUT_OK:
                    failed.append(store_pb2.PutStatus.Name(reply.batch.status))

        threads = [threading.Thread(target=caller) for _ in range(in_flight)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
    if failed:
        raise SystemExit(f"{len(failed)} batches not PUT_OK: {sorted(set(failed))}")
    return (len(reqs) - WARMUP_CALLS) * batch / seconds


def bench_throughput(root: Path, etcd: Etcd, args: argparse.Namespace) -> None:
    replicated_rates, alone_rates = [], []
    for run in range(args.runs):
        order = ("replicated", "alone") if run % 2 == 0 else ("alone", "replicated")
        for kind in order:
            if kind == "replicated":
                stores = replica_set(root, etcd, f"tput-{run}", 2, args.replicated_flush)
                target = wait_in_sync(stores)
            else:
                stores = [StoreProc(root / f"alone-{run}", {"PYRMQ_STORE_FLUSH_MODE": "SYNC"}).start()]
                target = stores[0]
            try:
                rate = pipelined(target.address, args.messages, args.batch, args.in_flight, args.body_bytes)
            finally:
                for store in stores:
                    store.stop()
            (replicated_rates if kind == "replicated" else alone_rates).append(rate)
            print(f"throughput run {run + 1} {kind:<10} {rate:>10,.0f} msgs/s", flush=True)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True, exist_ok=True)
    replicated, alone = statistics.median(replicated_rates), statistics.median(alone_rates)
    print(
        f"throughput  replicated (SYNC_MASTER + 1 slave, {args.replicated_flush} flush) {replicated:,.0f} msgs/s, "
        f"alone (SYNC flush) {alone:,.0f} msgs/s, ratio {replicated / alone:.2f} (target >= 0.6; medians of "
        f"{args.runs}, batches of {args.batch}, {args.in_flight} in flight, {args.body_bytes} B bodies)",
        flush=True,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def bench_lag(root: Path, etcd: Etcd, args: argparse.Namespace) -> None:
    stores = replica_set(root, etcd, "lag", 2, args.replicated_flush)
    try:
        master = wait_in_sync(stores)
        body = os.urandom(args.body_bytes)
        batch = max(1, args.lag_rate // 100)  # 100 calls a second
        with grpc.insecure_channel(master.address) as channel:  # the first segments: outside the samples
            for req in requests(WARMUP_CALLS, batch, body):
                store_pb2_grpc.StoreStub(channel).PutMessages(req, timeout=30)
        stop_at = time.monotonic() + args.lag_seconds
        lag_bytes: list[float] = []
        lag_ms: list[float] = []
        sent = [0]

        def load() -> None:
            with grpc.insecure_channel(master.address) as channel:
                stub = store_pb2_grpc.StoreStub(channel)
                next_at = time.monotonic()
                while next_at < stop_at:
                    [req] = requests(1, batch, body, sent[0])
                    stub.PutMessages(req, timeout=30)
                    sent[0] += batch
                    next_at += batch / args.lag_rate
                    time.sleep(max(0.0, next_at - time.monotonic()))

        loader = threading.Thread(target=load)
        loader.start()
        while loader.is_alive():
            status = replica_status(master.address)
            for replica in status.replicas if status is not None else []:
                if replica.replica_id != status.replica_id:
                    lag_bytes.append(replica.lag_bytes)
                    lag_ms.append(replica.lag_seconds * 1000)
            time.sleep(0.05)
        loader.join()
        print(
            f"lag         {sent[0] / args.lag_seconds:,.0f} msgs/s of {args.body_bytes} B for {args.lag_seconds:.0f} s, "
            f"{len(lag_bytes)} samples: bytes p50 {percentile(lag_bytes, 0.5):,.0f} p99 {percentile(lag_bytes, 0.99):,.0f} "
            f"max {max(lag_bytes, default=0):,.0f}; ms p50 {percentile(lag_ms, 0.5):.1f} "
            f"p99 {percentile(lag_ms, 0.99):.1f} max {max(lag_ms, default=0):.1f}",
            flush=True,
        )
    finally:
        for store in stores:
            store.stop()


@dataclass
class Trickle:
    """Single-message puts, one every ``interval_s``, through a client following the master:
    each OK put's completion time and the master address it was answered from."""

    client: GrpcStoreClient
    interval_s: float
    body: bytes
    oks: list[tuple[float, str]] = field(default_factory=list)
    not_ok: list[str] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            message = MessageToPut(TOPIC, i % QUEUES, self.body, {"KEYS": f"trickle-{i}"}, born_host="127.0.0.1:1")
            try:
                [outcome] = self.client.put_messages([message])
                if outcome.status is PutStatus.PUT_OK:
                    self.oks.append((time.monotonic(), self.client.address))
                else:
                    self.not_ok.append(outcome.status.name)
            except StoreError as e:
                self.not_ok.append(type(e).__name__)
            i += 1
            self.stopped.wait(self.interval_s)

    def first_ok_after(self, t0: float, not_from: str, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = [at for at, address in list(self.oks) if at > t0 and address != not_from]
            if got:
                return got[0]
            time.sleep(0.01)
        return None


def bench_failover(root: Path, etcd: Etcd, args: argparse.Namespace) -> None:
    stores = replica_set(root, etcd, "failover", 2, args.replicated_flush)
    by_address = {store.address: store for store in stores}
    client = GrpcStoreClient(
        "", put_stream=False, etcd_endpoints=etcd.endpoint, group="failover", failover_timeout_s=15
    )
    trickle = Trickle(client, args.trickle_ms / 1000, os.urandom(args.body_bytes))
    thread = threading.Thread(target=trickle.run)
    times: list[float] = []
    lost = 0
    try:
        wait_in_sync(stores)
        thread.start()
        for kill in range(args.kills):
            master = wait_in_sync(stores)
            ok_before = len(trickle.oks)
            deadline = time.monotonic() + 30
            while len(trickle.oks) < ok_before + 3 and time.monotonic() < deadline:  # the trickle reaches it
                time.sleep(0.01)
            t_kill = time.monotonic()
            master.kill()
            first = trickle.first_ok_after(t_kill, master.address, timeout_s=30)
            if first is None:
                lost += 1
                print(f"failover    kill {kill + 1}: no OK put within 30 s", flush=True)
            else:
                times.append(first - t_kill)
                print(f"failover    kill {kill + 1}: {first - t_kill:.2f} s to the first OK put", flush=True)
            by_address[master.address].start()  # rejoins as a slave (truncating any tail of its own)
        trickle.stopped.set()
        thread.join()
    finally:
        trickle.stopped.set()
        client.close()
        for store in stores:
            store.stop()
    print(
        f"failover    {len(times)} kills: kill -9 -> first OK put p50 {percentile(times, 0.5):.2f} s, "
        f"p99 {percentile(times, 0.99):.2f} s, max {max(times, default=float('nan')):.2f} s "
        f"(target p99 <= 5 s, lease_ttl_ms {LEASE_TTL_MS}); {len(trickle.oks):,} puts OK, "
        f"{len(trickle.not_ok)} not OK {sorted(set(trickle.not_ok))}; {lost} kills without a new master in 30 s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per throughput run")
    parser.add_argument("--runs", type=int, default=2, help="throughput pairs (replicated, alone), alternating order")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--replicated-flush", choices=("SYNC", "ASYNC"), default="SYNC")
    parser.add_argument("--lag-rate", type=int, default=5000, help="msgs/s of the lag scenario's load")
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--trickle-ms", type=float, default=20.0, help="pause between the failover trickle's puts")
    parser.add_argument("--only", nargs="*", default=None, choices=("throughput", "lag", "failover"))
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir on this disk)")
    args = parser.parse_args()
    want = set(args.only or ("throughput", "lag", "failover"))
    root = Path(args.dir or tempfile.mkdtemp(prefix="pyrmq-repl-bench-", dir=os.environ.get("TMPDIR", "/tmp")))
    print(f"pyrmq replication bench: data in {root}", flush=True)
    try:
        with Etcd(root / "etcd") as etcd:
            for name, scenario in (("throughput", bench_throughput), ("lag", bench_lag), ("failover", bench_failover)):
                if name in want:
                    (root / name).mkdir(parents=True, exist_ok=True)
                    scenario(root / name, etcd, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
