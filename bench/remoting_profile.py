"""Where the broker's CPU goes under bench/remoting_bench.py's scenarios: per thread, and the
Python part per piece of the remoting door.

    python bench/remoting_profile.py [--scenarios send1 batch pull kv1 kv64 max1 max64]
                                     [--messages 2000] [--rate 250] [--out DIR]

For each scenario a fresh ``pyrmq up`` (compare_nats'), the pyrmq side of the scenario run once
(NATS is not started; ``kvN`` / ``maxN``: the door cases GET_KV_CONFIG / GET_MAX_OFFSET, N in
flight, for ~5 s), and over its measured part:

* **threads**: the broker's CPU per thread (user + system, /proc/<pid>/task/<tid>/stat) per
  message or request, grouped by thread name (from ``py-spy dump``): the remoting loop, the
  remoting pool's workers, the put dispatcher, grpc's Python threads; a thread py-spy does not
  list is one of grpc core's C threads (the store client's channel: its polling and writes).
* **GIL**: ``py-spy record --gil`` (only the thread holding the GIL is sampled: Python work and
  what C code does under the GIL, e.g. uvloop's socket writes). Each sample goes to the piece its
  deepest known frame belongs to (``PIECES``: frame decode, the pool hand-off, the handler, the
  send path, the put coalescer, the store client, answer encode, the loop's writes, metrics...),
  reported as shares of the samples. py-spy falls far behind its ``--rate`` on this machine (it
  stops every thread for each sample), and in --gil mode keeps only samples that caught a GIL
  holder, so the shares, not samples / rate, are the figure; few samples: a rough share.

py-spy slows the broker (it stops it ``--rate`` times a second to read a consistent stack), so the rates here are lower
than remoting_bench's; compare the pieces' shares, not the rates. Raw stacks go to ``--out``.
Needs py-spy (``make bench-deps``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_nats as cn
import remoting_bench as rb
import uvloop

PY_SPY = str(Path(sys.executable).parent / "py-spy")
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
# (piece, frame pattern): a sample belongs to the piece of its deepest frame that matches one.
PIECES: list[tuple[str, re.Pattern[str]]] = [
    (piece, re.compile(pattern))
    for piece, pattern in (
        ("metrics", r"prometheus_client|observe_latency|metrics\.py"),
        ("frame decode (JSON header)", r"^(decode|_decode_json_header|_decode_binary_header) \(.*remoting/command\.py"),
        (
            "answer encode (JSON header)",
            r"^(encode|_encode_json_header|_encode_binary_header) \(.*remoting/command\.py",
        ),
        ("store client (grpc calls)", r"services/store/client/|grpc/_channel|grpc/_common|put_stream"),
        ("put coalescer (queue, lead, complete)", r"put_coalescer\.py"),
        ("classic send (records, checks)", r"classic_producer\.py|broker/validation\.py|properties_format"),
        ("batch body decode", r"remoting/batch\.py"),
        ("pull (read, filter, answer)", r"classic_pull\.py|remoting/pull\.py|consumer\.py"),
        ("offsets (commit)", r"offsets|update_offset"),
        ("send handler (header, answer)", r"remoting/send\.py"),
        ("other handlers", r"remoting/(consume|namesrv|context|acl)\.py"),
        ("answer hand-off to the loop", r"write_frame|call_soon_threadsafe|Channel\.answer"),
        ("loop writes (transport.write)", r"Channel\._flush|Channel\._write"),
        ("dispatch (ACL, route, errors)", r"Dispatcher\.(run|dispatch)"),
        ("pool hand-off (submit, worker wake-up)", r"concurrent/futures/thread\.py|ThreadPoolExecutor"),
        ("frame split (data_received)", r"Channel\.data_received"),
    )
]


def thread_cpu(pid: int) -> dict[int, float]:
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[int(tid)] = (int(fields[11]) + int(fields[12])) * TICK_S
    return cpu


def thread_names(pid: int) -> dict[int, str]:
    dump = subprocess.run([PY_SPY, "dump", "-p", str(pid)], capture_output=True, text=True).stdout
    return {int(m[1]): m[2] for m in re.finditer(r'^Thread (\d+) \([a-z]+\): "(.*)"', dump, re.M)}


def thread_group(name: str | None) -> str:
    if name is None:
        return "C threads (grpc core: polling, socket reads and writes)"
    if name.startswith("remoting_"):
        return "remoting pool workers"
    if name.endswith("(_run)"):
        return "grpc channel spin (a client channel's completions)"
    if name.endswith("(_serve)"):
        return "grpc server (its completion queue)"
    return re.sub(r"[-_]\d+\b|Thread-\d+ ", "", name)


# Leaf frames that are the thread's own C loop: the sample is in C under the GIL.
LEAVES: list[tuple[str, re.Pattern[str]]] = [
    ("uvloop in C (socket reads, callbacks)", re.compile(r"^RemotingServer\.start\.<locals>\.run ")),
    ("grpc channel spin (completion queue, C)", re.compile(r"channel_spin")),
    ("threading (locks, conditions)", re.compile(r"\(threading\.py:")),
]


def piece(stack: list[str]) -> str:
    for name, pattern in LEAVES:
        if pattern.search(stack[-1]):
            return name
    for frame in reversed(stack):
        for name, pattern in PIECES:
            if pattern.search(frame):
                return name
    return "other: " + stack[-1][:80]


class Sampler(rb.Hooks):
    """Thread CPU of the broker and the store, and py-spy --gil on the broker, over each measured
    part (``rate`` 0: threads only, nothing slows the broker)."""

    def __init__(self, out: Path, rate: int) -> None:
        self.out, self.rate = out, rate
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, srv: cn.Server, name: str) -> None:
        self.pids = {role: srv.pids[role] for role in ("broker", "store")}
        self.path = self.out / f"broker-{name}.txt"
        if self.rate:
            self.proc = subprocess.Popen(
                [PY_SPY, "record", "--gil", "-r", str(self.rate), "--format", "raw"]
                + ["-o", str(self.path), "-p", str(self.pids["broker"])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # py-spy attaches
        self.cpu0 = {role: thread_cpu(pid) for role, pid in self.pids.items()}
        self.started = time.perf_counter()

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.cpu1 = {role: thread_cpu(pid) for role, pid in self.pids.items()}
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
            self.proc = None
        self.names = {role: thread_names(pid) for role, pid in self.pids.items()}

    def report(self, label: str, count: int) -> list[str]:
        lines = [f"{label}: {count:,} in {self.elapsed:.1f} s ({count / self.elapsed:,.0f}/s)"]
        for role in self.pids:
            groups: dict[str, float] = collections.defaultdict(float)
            for tid, cpu in self.cpu1[role].items():
                groups[thread_group(self.names[role].get(tid))] += cpu - self.cpu0[role].get(tid, 0.0)
            total = sum(groups.values())
            lines.append(f"  {role}: {total / count * 1e6:,.1f} CPU-µs each; by thread:")
            top = sorted(groups.items(), key=lambda item: -item[1])[:8]
            lines += [f"    {cpu / count * 1e6:8.1f}  {group}" for group, cpu in top if cpu > 0]
        if not self.rate:
            return lines
        pieces: collections.Counter[str] = collections.Counter()
        for line in self.path.read_text().splitlines():
            stack, _, samples = line.rpartition(" ")
            if stack:
                pieces[piece(stack.split(";"))] += int(samples)
        taken = sum(pieces.values())
        lines.append(f"  broker Python under the GIL (py-spy --gil, {taken:,} samples), share by piece:")
        lines += [f"    {100 * n / max(1, taken):5.1f}%  {name}" for name, n in pieces.most_common(16)]
        return lines


def run(scenario: str, sampler: Sampler, messages: int, body: bytes) -> list[str]:
    with cn.pyrmq_cluster("async") as srv:
        if scenario in ("send1", "batch", "pull"):
            n = messages if scenario == "send1" else messages * 10 // 256 * 256
            uvloop.run(getattr(rb, f"pyrmq_{scenario}")(srv, n, body))
            return sampler.report(scenario, n)
        window = int(scenario.lstrip("kvmax"))
        channel, cases = rb.door_cases(srv, window)
        with channel:
            go = dict(cases)[
                "remoting GET_KV_CONFIG (inline)"
                if scenario.startswith("kv")
                else "remoting GET_MAX_OFFSET (pool + store)"
            ]
            go(500, 1)
            count = rb.door_rate(go, window, 5.0)
            sampler.start(srv, scenario)
            go(count, window)
            sampler.stop()
        return sampler.report(scenario, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=["send1", "batch", "pull", "kv1", "kv64", "max1", "max64"])
    parser.add_argument("--messages", type=int, default=2000, help="send1; x10 for batch and pull")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second (0: no py-spy)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/remoting-profile"))
    parser.add_argument("--client-cpu", type=int, default=-1, help="pin this process (the load) to a CPU; -1: not")
    args = parser.parse_args()
    if args.client_cpu >= 0:
        os.sched_setaffinity(0, {args.client_cpu})
    if not os.access(PY_SPY, os.X_OK):
        print("py-spy not found: run `make bench-deps`", file=sys.stderr)
        sys.exit(2)
    args.out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(args.out, args.rate)
    rb.HOOKS = sampler
    body = os.urandom(1024)
    for scenario in args.scenarios:
        print("\n".join(run(scenario, sampler, args.messages, body)), flush=True)
    print(f"raw stacks: {args.out}/broker-SCENARIO.txt")


if __name__ == "__main__":
    main()
