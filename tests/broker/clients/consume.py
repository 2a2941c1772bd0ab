"""Consume with the official rocketmq-python-client and print one JSON line per event.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python consume.py '{"endpoint": "127.0.0.1:8081", "mode": "simple", "group": "G", "topic": "T", ...}'

Job fields: ak, sk (credentials, default none), mode ("simple" or "push"), group, topic, expression (default "*"), filter_type
("TAG", the default, or "SQL": expression is a SQL92 property filter), count (stop after this many deliveries), deadline_s (give up after this long), await_s
(simple: long polling seconds), invisible_s (simple), max_messages (simple: per receive, default 32),
action (simple, per delivery):
"ack", "change_then_ack" (change_invisible_duration 15 s, then ack with the new handle),
"none" (never ack: redelivered later), "none_then_ack" (ack only deliveries with attempt > 1),
"nack" (change_invisible_duration to nack_s, default 1 s, and never ack);
listener_s (push: the listener works this long on each message before SUCCESS), linger_s (push:
keep consuming this long after count deliveries, so that a duplicate would show; default 1).
Output per delivery: {"body", "tag", "keys", "message_id", "attempt", "properties",
"message_group", "priority", "message_type", "acked": true/false/null, "error": str|null}; receive errors:
{"receive_error": str, "code": int|null}.
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import FilterType


def describe(message, acked=None, error=None):
    return {
        "body": message.body.decode(errors="replace"),
        "tag": message.tag,
        "keys": list(message.keys or []),
        "message_id": message.message_id,
        "attempt": message.delivery_attempt,
        "properties": dict(message.properties or {}),
        "message_group": message.message_group,
        "priority": message.priority,
        "message_type": message.message_type,
        "acked": acked,
        "error": error,
    }


def emit(record):
    print(json.dumps(record), flush=True)


def subscription(job):
    filter_type = {"TAG": FilterType.TAG, "SQL": FilterType.SQL}[job.get("filter_type", "TAG")]
    return {job["topic"]: FilterExpression(job.get("expression", "*"), filter_type)}


def run_simple(job, config):
    consumer = SimpleConsumer(
        config, job["group"], subscription(job), await_duration=job.get("await_s", 5), tls_enable=bool(job.get("tls"))
    )
    consumer.startup()
    delivered = 0
    end = time.monotonic() + job.get("deadline_s", 60)
    action = job.get("action", "ack")
    try:
        while delivered < job.get("count", 1) and time.monotonic() < end:
            try:
                messages = consumer.receive(job.get("max_messages", 32), job.get("invisible_s", 15))
            except Exception as exc:  # noqa: BLE001 - reported to the test
                emit({"receive_error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "code", None)})
                continue
            for message in messages:
                delivered += 1
                acked, error = None, None
                try:
                    if action == "change_then_ack":
                        consumer.change_invisible_duration(message, 15)
                        consumer.ack(message)
                        acked = True
                    elif action == "nack":  # a failed delivery: visible again after nack_s, never acked
                        consumer.change_invisible_duration(message, job.get("nack_s", 1))
                    elif action == "ack" or (action == "none_then_ack" and message.delivery_attempt > 1):
                        consumer.ack(message)
                        acked = True
                except Exception as exc:  # noqa: BLE001
                    acked, error = False, f"{type(exc).__name__}: {exc}"
                emit(describe(message, acked, error))
    finally:
        consumer.shutdown()


class Recorder(MessageListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.messages = []
        self.enough = threading.Event()
        self.count = 1
        self.listener_s = 0.0

    def consume(self, message):
        time.sleep(self.listener_s)  # a slow listener: the broker must keep the message invisible
        with self.lock:
            self.messages.append(message)
            emit(describe(message, acked=True))
            if len(self.messages) >= self.count:
                self.enough.set()
        return ConsumeResult.SUCCESS


def run_push(job, config):
    recorder = Recorder()
    recorder.count = job.get("count", 1)
    recorder.listener_s = job.get("listener_s", 0.0)
    consumer = PushConsumer(config, job["group"], recorder, subscription(job))
    consumer.startup()
    try:
        recorder.enough.wait(job.get("deadline_s", 60))
        time.sleep(job.get("linger_s", 1.0))  # let the acks go out (and any duplicate come)
    finally:
        consumer.shutdown()


def main():
    job = json.loads(sys.argv[1])
    config = ClientConfiguration(
        job["endpoint"], Credentials(job.get("ak", ""), job.get("sk", "")), request_timeout=job.get("timeout", 5)
    )
    (run_push if job.get("mode") == "push" else run_simple)(job, config)
    emit({"done": True})


if __name__ == "__main__":
    main()
