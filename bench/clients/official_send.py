"""Time blocking sends of the official rocketmq-python-client, for bench/compare_nats.py.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python official_send.py '{"endpoint": "127.0.0.1:8081", "topic": "T", "count": 2000,
                              "warmup": 200, "body_size": 1024}'

Starts a Producer for the topic, sends ``warmup`` messages, prints {"ready": true} and waits for
one line on stdin (so the caller can read the servers' CPU counters), then sends ``count``
messages one at a time (``Producer.send``, one in flight) and prints
{"n", "seconds", "rate", "p50_ms", "p99_ms"} before shutting the producer down. A failed send
prints {"error": ...} and exits 1.
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main():
    job = json.loads(sys.argv[1])
    body = b"x" * job.get("body_size", 1024)

    def message(i):
        m = Message()
        m.topic = job["topic"]
        m.body = body
        m.tag = "TagA"
        m.keys = f"order-{i}"
        return m

    producer = Producer(ClientConfiguration(job["endpoint"], Credentials(), request_timeout=10), (job["topic"],))
    producer.startup()
    try:
        for i in range(job.get("warmup", 200)):
            producer.send(message(i))
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()
        latencies = []
        started = time.perf_counter()
        for i in range(job["count"]):
            begun = time.perf_counter()
            producer.send(message(i))
            latencies.append(time.perf_counter() - begun)
        seconds = time.perf_counter() - started
        latencies.sort()
        print(
            json.dumps(
                {
                    "n": job["count"],
                    "seconds": seconds,
                    "rate": job["count"] / seconds,
                    "p50_ms": latencies[len(latencies) // 2] * 1e3,
                    "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
                }
            ),
            flush=True,
        )
    except Exception as exc:  # noqa: BLE001 - reported to the caller
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        sys.exit(1)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
