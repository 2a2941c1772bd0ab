"""Several broker groups and brokers (issue 17): aggregate pipelined send and consume throughput
of ``pyrmq up --groups G --brokers B`` (placed on cores as ``up`` does by default), with the
CPU-µs per message of every process, for each (G, B) asked.

    python bench/groups_bench.py [--shapes 1x1 2x1 1x2 2x2] [--messages 40000] [--in-flight 8]

Send: SendMessage with 32 1 KiB messages per request, ``--in-flight`` requests at once, each
request thread on a connection of its own (so several brokers on the one port share the
connections). Consume: the topic's messages are then received in batches of 32 and acked in one
AckMessage per batch, ``--consumers`` loops per broker group at once (message_queue.broker names
the group), all groups at once. CPU is each process's user + system time over the measured phase
divided by the messages; "all" is the sum over every process of the cluster (etcd included).
Run alone: the figures mean nothing next to another benchmark or the test suite.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from broker_bench import GROUP, TOPIC, consume_load, proc_cpu_s, send_load
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.launcher.up import parse_summary

READY = re.compile(r"^pyrmq up: (?P<summary>.*) cpus=(?P<cpus>\S+) \(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
BODY = b"x" * 1024
SEPARATE = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel


def listening_pid(address: str) -> int:
    port = address.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"pid=(\d+)", out).group(1))  # type: ignore[union-attr]


class Cluster:
    """``pyrmq up --groups G --brokers B`` on free ports; each process's pid by its label."""

    def __init__(self, groups: int, brokers: int, data_dir: Path) -> None:
        self.up = subprocess.Popen(
            [sys.executable, "-m", "services.launcher.cli", "up", "--data-dir", str(data_dir), "--port", "0"]
            + ["--store-port", "0", "--metrics-port", "0", "--groups", str(groups), "--brokers", str(brokers)]
            + ["--create-topic", TOPIC],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.up.stdout is not None
        for line in self.up.stdout:
            match = READY.match(line.strip())
            if match:
                break
        else:
            raise SystemExit("pyrmq up exited before it was ready")
        self.endpoint = match["clients"]
        self.cpus = dict(item.split(":", 1) for item in match["cpus"].split(";"))
        # A process's own port: its metrics server (the client port is HAProxy's, a child it counts).
        self.pids = {
            label: listening_pid(ready["metrics"].split("/")[2] if ready["metrics"] != "off" else ready["grpc"])
            for label, ready in parse_summary(match.group(0)).items()
        }
        self.families = {label: family(pid) for label, pid in self.pids.items()}
        threading.Thread(target=lambda: [None for _ in self.up.stdout], daemon=True).start()  # type: ignore[union-attr]

    def cpu_s(self) -> dict[str, float]:
        """Each process's CPU seconds, its children's (the broker's HAProxy) included."""
        return {label: sum(proc_cpu_s(p) for p in pids) for label, pids in self.families.items()}

    def stop(self) -> None:
        self.up.terminate()
        self.up.wait(60)


def family(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        for child in children:
            out += family(int(child))
    return out


def measured(cluster: Cluster, run: Callable[[], tuple[int, float]]) -> tuple[float, dict[str, float]]:
    """(msgs/s, label -> CPU-µs per message) of ``run`` (which returns messages, seconds)."""
    before = cluster.cpu_s()
    n, elapsed = run()
    after = cluster.cpu_s()
    return n / elapsed, {label: (after[label] - before[label]) / n * 1e6 for label in before}


def depths(endpoint: str) -> dict[str, int]:
    """Broker group -> messages of the topic the consumer group has not consumed there."""
    with grpc.insecure_channel(endpoint) as channel:
        admin = pb_grpc.AdminStub(channel)
        if not admin.ListGroups(pb.ListGroupsRequest(), timeout=30).groups:
            admin.CreateGroup(pb.CreateGroupRequest(name=GROUP), timeout=30)
        progress = admin.GetConsumerProgress(pb.GetConsumerProgressRequest(group=GROUP, topic=TOPIC), timeout=30)
    out: dict[str, int] = {}
    for queue in progress.queues:
        out[queue.broker_name] = out.get(queue.broker_name, 0) + queue.lag
    return out


def run_shape(groups: int, brokers: int, n: int, in_flight: int, consumers: int) -> None:
    with tempfile.TemporaryDirectory(prefix="groups-bench-") as data:
        cluster = Cluster(groups, brokers, Path(data))
        try:
            channels = [grpc.insecure_channel(cluster.endpoint, options=SEPARATE) for _ in range(in_flight)]
            stubs = [s_grpc.MessagingServiceStub(c) for c in channels]
            send_load(stubs, 32 * in_flight * 4, in_flight, 32, BODY)  # warm-up
            with grpc.insecure_channel(cluster.endpoint) as channel:  # the warm-up consumed first
                stub = s_grpc.MessagingServiceStub(channel)
                for group, count in depths(cluster.endpoint).items():
                    consume_load(stub, count, 1, group)
            send_rate, send_cpu = measured(cluster, lambda: (n, send_load(stubs, n, in_flight, 32, BODY)[0]))
            tail = 64 * consumers  # left in each group, so that no receive loop waits on an empty group

            def consume_all() -> tuple[int, float]:
                targets = {group: count - tail for group, count in depths(cluster.endpoint).items()}
                threads = [
                    threading.Thread(target=consume_load, args=(stubs[i % len(stubs)], count, consumers, group))
                    for i, (group, count) in enumerate(targets.items())
                ]
                started = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return sum(targets.values()), time.perf_counter() - started

            consume_rate, consume_cpu = measured(cluster, consume_all)
            for channel in channels:
                channel.close()
        finally:
            cluster.stop()
    print(f"\n{groups} group(s), {brokers} broker(s), {n} messages of 1 KiB (cpus: {cluster.cpus})")
    for name, rate, cpu in (("send32", send_rate, send_cpu), ("consume", consume_rate, consume_cpu)):
        hot = {label: us for label, us in cpu.items() if us >= 0.5}
        parts = ", ".join(f"{label} {us:.0f}" for label, us in sorted(hot.items()))
        print(f"  {name:8s} {rate:9,.0f} msgs/s   CPU-µs/msg: all {sum(cpu.values()):.0f} ({parts})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["1x1", "2x1", "1x2", "2x2"], help="GROUPSxBROKERS")
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=2, help="receive loops per broker group")
    ns = parser.parse_args()
    for shape in ns.shapes:
        groups, brokers = (int(part) for part in shape.split("x"))
        run_shape(groups, brokers, ns.messages // 32 * 32, ns.in_flight, ns.consumers)


if __name__ == "__main__":
    main()
