"""Lite consumer benchmark (issue 18): receive latency for a consumer of 1,000 lite topics in a
store holding a million.

    python bench/lite_consume_bench.py [--lite-topics 1000000] [--subscribed 1000] [--messages 2000] [--rate 200]

1. fill     ``--lite-topics`` lite topics with one message each, in process (bench/lite_bench.py's send)
2. cluster  a store and a broker process on that data (as broker_bench.py starts them)
3. backlog  one lite consumer (raw v2 on one channel) subscribes ``--subscribed`` of them at random
            (SyncLiteSubscription PARTIAL_ADD, 100 a request) and receives and acks their backlog:
            the time to drain it, and each receive's duration
4. live     a producer thread sends ``--messages`` LITE messages at ``--rate`` per second, each to a
            random subscribed lite topic, while the consumer long-polls (batches of 32) and acks:
            the latency from the send's start to the receive that delivered it (p50/p99/max), and
            the broker's and store's CPU per message over this phase; then the same load on a
            NORMAL topic of the same store and consumer group, for comparison
Targets: none set by the issue beyond reporting the figure; the measure of a good answer is a
latency close to a plain topic's (bench/broker_bench.py consume) at this scale.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from broker_bench import cluster
from google.protobuf.duration_pb2 import Duration
from lite_bench import PARENT, QUEUES, open_store, send

from services.store.metadata.config_files import TopicConfig

GROUP = "LiteBenchGroup"
NORMAL_TOPIC = "LiteBenchNormal"
CONSUMER = (("x-mq-client-id", "lite-bench-consumer"),)
PRODUCER = (("x-mq-client-id", "lite-bench-producer"),)


def fill(data: Path, count: int) -> float:
    store, _ = open_store(data / "store")
    config = TopicConfig(topic_name=PARENT, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    config.message_type = "LITE"
    store.topics.create_or_update(config)
    store.topics.create_or_update(TopicConfig(topic_name=NORMAL_TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))
    elapsed = send(store, count, 32, os.urandom(64))
    store.shutdown()
    return elapsed


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def receive(stub: s_grpc.MessagingServiceStub, polling_s: int = 5, topic: str = PARENT) -> list[d.Message]:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=GROUP),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=0),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=polling_s),
    )
    replies = stub.ReceiveMessage(request, metadata=CONSUMER, timeout=polling_s + 10)
    return [r.message for r in replies if r.HasField("message")]


def ack(stub: s_grpc.MessagingServiceStub, messages: list[d.Message], topic: str = PARENT) -> None:
    if not messages:
        return
    entries = [
        s.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle,
            lite_topic=m.system_properties.lite_topic,
        )
        for m in messages
    ]
    request = s.AckMessageRequest(group=d.Resource(name=GROUP), topic=d.Resource(name=topic), entries=entries)
    response = stub.AckMessage(request, metadata=CONSUMER, timeout=10)
    assert response.status.code == d.OK, response.status


def subscribe(stub: s_grpc.MessagingServiceStub, names: list[str]) -> None:
    for first in range(0, len(names), 100):
        request = s.SyncLiteSubscriptionRequest(
            action=d.PARTIAL_ADD,
            topic=d.Resource(name=PARENT),
            group=d.Resource(name=GROUP),
            lite_topic_set=names[first : first + 100],
        )
        status = stub.SyncLiteSubscription(request, metadata=CONSUMER, timeout=10).status
        assert status.code == d.OK, status


def live(
    stub: s_grpc.MessagingServiceStub, names: list[str], messages: int, rate: float, topic: str = PARENT
) -> list[float]:
    """``names``: the lite topics to send to; empty: NORMAL messages to ``topic``."""
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    done = threading.Event()

    def produce() -> None:
        rng = random.Random(11)
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for _ in range(messages):
            message_id = uuid.uuid4().hex.upper()
            system = d.SystemProperties(message_id=message_id, message_type=d.NORMAL, body_encoding=d.IDENTITY)
            if names:
                system.message_type = d.LITE
                system.lite_topic = rng.choice(names)
            message = d.Message(topic=d.Resource(name=topic), body=b"x" * 64, system_properties=system)
            sent_at[message_id] = time.perf_counter()
            response = stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=PRODUCER, timeout=10)
            assert response.status.code == d.OK, response.status
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
        done.set()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    while len(latencies) < messages:
        got = receive(stub, topic=topic)
        now = time.perf_counter()
        for m in got:
            started = sent_at.get(m.system_properties.message_id)
            if started is not None:
                latencies.append(now - started)
        ack(stub, got, topic)
        if done.is_set() and not got:
            break
    producer.join()
    return latencies


def report(what: str, latencies: list[float], args: argparse.Namespace, broker_us: float, store_us: float) -> None:
    print(
        f"live     {len(latencies):,} of {args.messages:,} messages at {args.rate:.0f}/s to {what}: send-to-receive "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms; CPU per message: broker {broker_us:,.0f} µs, store {store_us:,.0f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lite-topics", type=int, default=1_000_000)
    parser.add_argument("--subscribed", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="live sends per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lite-consume-bench-") as tmp:
        data = Path(tmp)
        filled_s = fill(data, args.lite_topics)
        print(f"fill     {args.lite_topics:,} lite topics with one message each: {filled_s:.1f} s (in process)")
        segment = ("--commitlog-file-size-bytes", str(256 << 20))  # lite_bench's open_store
        with cluster(["--tls-mode", "plaintext"], data, segment) as running:
            with grpc.insecure_channel(running.endpoint) as channel:
                stub = s_grpc.MessagingServiceStub(channel)
                names = [f"session-{i}" for i in random.Random(5).sample(range(args.lite_topics), args.subscribed)]
                started = time.perf_counter()
                subscribe(stub, names)
                subscribed_s = time.perf_counter() - started
                durations: list[float] = []
                drained = 0
                started = time.perf_counter()
                while drained < len(names):
                    begin = time.perf_counter()
                    got = receive(stub)
                    durations.append(time.perf_counter() - begin)
                    ack(stub, got)
                    drained += len(got)
                    if not got:
                        break
                drain_s = time.perf_counter() - started
                print(
                    f"backlog  subscribe {len(names):,} lite topics: {subscribed_s * 1000:,.0f} ms; receive+ack their "
                    f"{drained:,} messages: {drain_s:.2f} s ({drained / drain_s:,.0f} msgs/s), {len(durations)} receives, "
                    f"each p50 {statistics.median(durations) * 1000:.1f} ms, p99 {percentile(durations, 0.99) * 1000:.1f} ms"
                )
                for what, lite_topics, topic in (("lite topics", names, PARENT), ("a NORMAL topic", [], NORMAL_TOPIC)):
                    # (a NORMAL topic of 8 queues in the same store: the comparison)
                    before = running.cpu_s()
                    latencies = live(stub, lite_topics, args.messages, args.rate, topic)
                    broker_s, store_s = (after - was for after, was in zip(running.cpu_s(), before))
                    per = 1e6 / max(1, len(latencies))
                    report(what, latencies, args, broker_s * per, store_s * per)


if __name__ == "__main__":
    main()
