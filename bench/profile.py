"""Flame graphs of the broker and the store under one broker_bench scenario (py-spy).

    python bench/profile.py [--scenario send1|send32|consume] [--seconds 20] [--out DIR] [--native]

Starts a store and a broker (bench/broker_bench.py's ``cluster``), warms up, then runs the
scenario's load while ``py-spy record`` samples both processes, and writes
``DIR/{broker,store}-SCENARIO.svg`` (flame graphs; open them in a browser) plus ``.txt`` in
py-spy's raw "collapsed stacks" format. The summary printed at the end is the top frames by
own samples, leaving out threads that only wait (grpc polling, queue and lock waits), so it
shows where Python CPU goes. Caveat: py-spy cannot tell idle threads apart on this machine,
and time inside grpc's C code shows under its calling Python frame (``_status``,
``_send_response``, ``_serve``), so most gRPC cost is filtered out with the waits; compare the
busy-sample count with the process's CPU time (bench/broker_bench.py) to see how much of it
the Python frames explain. ``--native`` adds C frames, where waits show as libc futex calls.
Needs py-spy (``make bench-deps`` installs it).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broker_bench as bb
import grpc
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

PY_SPY = str(Path(sys.executable).parent / "py-spy")
# Leaf frames of threads that wait rather than work (grpc's poller, pool and queue waits).
WAITING = re.compile(
    r"^(Condition\.wait|Condition\.__enter__|_worker \(concurrent/futures/thread\.py:81|"
    r"_serve \(grpc/_server\.py:13|PendingPut\.wait|_run_channel_spin_thread|"
    r"_consume_request_iterator|Event\.wait|_wait_once|select|sleep|SimpleQueue\.get)"
)
LOADS = {
    "send1": lambda stub, body: bb.send_load(stub, 500, 1, 1, body),
    "send32": lambda stub, body: bb.send_load(stub, 32 * 200, 4, 32, body),
    "consume": lambda stub, body: (bb.send_load(stub, 32 * 100, 4, 32, body), bb.consume_load(stub, 3200, 4)),
}


def summary(raw: Path, top: int) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    busy = waiting = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        leaf = stack.split(";")[-1]
        if WAITING.match(leaf):
            waiting += int(count)
            continue
        busy += int(count)
        own[leaf] += int(count)
    lines = [f"{raw.stem}: {busy} busy samples ({waiting} waiting left out); top frames by own samples:"]
    lines += [f"  {100 * n / max(busy, 1):5.1f}%  {frame[:120]}" for frame, n in own.most_common(top)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(LOADS), default="send1")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=Path("bench/profiles"))
    parser.add_argument("--native", action="store_true")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    body = os.urandom(1024)
    load = LOADS[args.scenario]
    with bb.cluster([]) as c, grpc.insecure_channel(c.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        load(stub, body)  # warm-up
        recorders = []
        for name, proc in (("broker", c.broker), ("store", c.store)):
            stem = args.out / f"{name}-{args.scenario}"
            for fmt, suffix in (("flamegraph", ".svg"), ("raw", ".txt")):
                recorders.append(
                    subprocess.Popen(
                        [
                            PY_SPY,
                            "record",
                            "-r",
                            str(args.rate),
                            "-d",
                            str(args.seconds),
                            "--format",
                            fmt,
                            "-o",
                            str(stem.with_suffix(suffix)),
                            "-p",
                            str(proc.pid),
                            *(["--native"] if args.native else []),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        time.sleep(1)
        end = time.monotonic() + args.seconds - 2
        while time.monotonic() < end:
            load(stub, body)
        for recorder in recorders:
            recorder.wait()
    for name in ("broker", "store"):
        print("\n".join(summary(args.out / f"{name}-{args.scenario}.txt", args.top)))
    print(f"flame graphs: {args.out}/{{broker,store}}-{args.scenario}.svg")


if __name__ == "__main__":
    main()
