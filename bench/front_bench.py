"""The client port's front (services/broker/front.py), measured: what HAProxy in front of gRPC
costs the plaintext path, and what TLS costs, against gRPC on the port itself.

    python bench/front_bench.py [--messages 3000] [--runs 3]

Three arms, each on a fresh cluster per run, in a rotating order (A B C, B C A, C A B ...) so
that no arm always runs first or last (the second run of a pair is slower on this machine):

* ``direct``: ``tls_mode = plaintext``: gRPC on the port itself, a plaintext client;
* ``front``: ``tls_mode = both`` (the default): the same plaintext client, through HAProxy;
* ``front-tls``: ``tls_mode = both``, a TLS client trusting the generated certificate.

Scenarios as bench/broker_bench.py's: send1 (one 1 KiB message per request, 1 in flight:
throughput and p50 latency), send32 (32 per request, 4 in flight) and consume (4 loops of
receive 32 + ack). The issue's budget: ``front`` within 10 % of ``direct`` on send32 and consume
throughput and on send1 p50. Prints the median of each arm and its ratio to ``direct``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from broker_bench import Cluster, Row, cluster, consume_load, measured, send_load

ARMS: dict[str, tuple[list[str], bool]] = {  # name -> (broker flags, TLS client)
    "direct": (["--tls-mode", "plaintext"], False),
    "front": ([], False),
    "front-tls": ([], True),
}


def channel_of(c: Cluster, tls: bool) -> grpc.Channel:
    if not tls:
        return grpc.insecure_channel(c.endpoint)
    return grpc.secure_channel(c.endpoint, grpc.ssl_channel_credentials(c.cert.read_bytes()))


def scenario(name: str, c: Cluster, tls: bool, n: int, body: bytes) -> Row:
    with channel_of(c, tls) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        run: Callable[[], tuple[float, list[float]]]
        if name == "send1":
            send_load(stub, 320, 1, 1, body)
            run = lambda: send_load(stub, n, 1, 1, body)  # noqa: E731
            count = n
        elif name == "send32":
            send_load(stub, 320, 4, 32, body)
            run = lambda: send_load(stub, n * 10, 4, 32, body)  # noqa: E731
            count = n * 10
        else:
            send_load(stub, -(-(n * 10 + 320 + 32 * 4) // 32) * 32, 4, 32, body)
            consume_load(stub, 320)
            run = lambda: consume_load(stub, n * 10, 4)  # noqa: E731
            count = n * 10
        return measured(c, count, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="per send1 run (x10 for send32 and consume)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", nargs="+", default=["send1", "send32", "consume"])
    args = parser.parse_args()
    body = os.urandom(1024)
    names = list(ARMS)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; median of {args.runs} runs", flush=True)
    for name in args.scenarios:
        rows: dict[str, list[Row]] = {arm: [] for arm in names}
        for run in range(args.runs):
            order = names[run % len(names) :] + names[: run % len(names)]
            for arm in order:
                flags, tls = ARMS[arm]
                with cluster(flags) as c:
                    rows[arm].append(scenario(name, c, tls, args.messages, body))
        base_rate = statistics.median(r.rate for r in rows["direct"])
        base_p50 = statistics.median(r.p50_ms for r in rows["direct"])
        for arm in names:
            rate = statistics.median(r.rate for r in rows[arm])
            p50 = statistics.median(r.p50_ms for r in rows[arm])
            spread = f"[{min(r.rate for r in rows[arm]):,.0f}-{max(r.rate for r in rows[arm]):,.0f}]"
            print(
                f"{name:<8} {arm:<10} {rate:>8,.0f} msgs/s {spread:<17} ({rate / base_rate:6.1%} of direct)  "
                f"p50 {p50:6.3f} ms ({p50 / base_p50:6.1%} of direct)",
                flush=True,
            )


if __name__ == "__main__":
    main()
