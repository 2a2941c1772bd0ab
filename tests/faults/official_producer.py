"""Send with the official rocketmq-python-client until told to stop, one JSON line per event. Run
by tests/faults/chaos.py in a subprocess (tests/support/official_client.py's ``Client``: the
client's apache.rocketmq.v2 stubs clash with ours in one process):

    python official_producer.py '{"endpoint": "10.0.0.2:8081", "topic": "T", "writer": "o0", "seed": 1,
                                  "stop_file": "/tmp/stop", "pause_s": [0, 0.02], "body_size": [64, 512]}'

One send at a time, a pause drawn from ``pause_s`` between two, until ``stop_file`` exists. Per
send: ``{"invoke": key, "body": text}`` before it, then ``{"done": key, "ok": true, "message_id"}``
or ``{"done": key, "ok": false, "error", "code"}``; ``{"stopped": sends}`` last. The value ``key``
is ``<writer>-<counter>`` and the body ``key|`` followed by hex text seeded by (seed, key), the
shape of tests/faults/checker.py's ``make_body`` (the runner records the body printed here, so
the checker traces every delivery to its send whatever the bytes).
"""

import json
import os
import random
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def emit(record):
    print(json.dumps(record), flush=True)


def body_of(key, seed, size_min, size_max):
    rng = random.Random(f"{seed}/{key}")
    size = rng.randint(size_min, size_max)
    return key + "|" + rng.randbytes((size + 1) // 2).hex()[:size]


def main():
    job = json.loads(sys.argv[1])
    rng = random.Random(f"{job['seed']}/{job['writer']}")
    pause_min_s, pause_max_s = job.get("pause_s", (0.0, 0.02))
    size_min, size_max = job.get("body_size", (64, 512))
    producer = Producer(
        ClientConfiguration(job["endpoint"], Credentials("", ""), request_timeout=job.get("timeout", 5)),
        (job["topic"],),
    )
    producer.startup()
    counter = 0
    try:
        while not os.path.exists(job["stop_file"]):
            key = f"{job['writer']}-{counter}"
            counter += 1
            body = body_of(key, job["seed"], size_min, size_max)
            emit({"invoke": key, "body": body})
            message = Message()
            message.topic = job["topic"]
            message.body = body.encode()
            message.keys = key
            try:
                receipt = producer.send(message)
                emit({"done": key, "ok": True, "message_id": receipt.message_id})
            except Exception as exc:  # noqa: BLE001 - reported to the runner
                emit(
                    {
                        "done": key,
                        "ok": False,
                        "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                        "code": code if isinstance(code := getattr(exc, "code", None), int) else None,
                    }
                )
            time.sleep(rng.uniform(pause_min_s, pause_max_s))  # the send rate
    finally:
        emit({"stopped": counter})
        producer.shutdown()


if __name__ == "__main__":
    main()
