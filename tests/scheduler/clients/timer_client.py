"""Delay messages with the official rocketmq-python-client: send (and recall), or consume.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python timer_client.py '{"mode": "send", "endpoint": "...", "topic": "T", "messages": [...], "recall": [1]}'
    python timer_client.py '{"mode": "consume", "endpoint": "...", "topic": "T", "group": "G", "count": 2,
                             "deadline_s": 20}'

send: messages are {"body", "delivery_timestamp" (seconds, as the client takes it)}; after all
are sent, the ones whose indexes are in "recall" are recalled with their receipts' handles.
One JSON line per send ({"ok", "message_id", "recall_handle"} or {"ok": false, "error"}), then
one per recall ({"recalled": index, "ok", "message_id" or "error", "code"}).
consume: one JSON line per received message {"message_id", "body", "received_ms",
"delivery_timestamp_ms"}, then {"done": true}.
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def emit(record):
    print(json.dumps(record), flush=True)


def send(job, config):
    producer = Producer(config, (job["topic"],))
    producer.startup()
    receipts = []
    try:
        for spec in job["messages"]:
            message = Message()
            message.topic = job["topic"]
            message.body = spec["body"].encode()
            message.delivery_timestamp = spec["delivery_timestamp"]
            try:
                receipt = producer.send(message)
                receipts.append(receipt)
                emit({"ok": True, "message_id": receipt.message_id, "recall_handle": receipt.recall_handle})
            except Exception as exc:  # noqa: BLE001 - reported to the test
                receipts.append(None)
                emit({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        for index in job.get("recall", []):
            try:
                message_id = producer.recall_message(job["topic"], receipts[index].recall_handle)
                emit({"recalled": index, "ok": True, "message_id": message_id})
            except Exception as exc:  # noqa: BLE001
                emit(
                    {
                        "recalled": index,
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}",
                        "code": getattr(exc, "code", None),
                    }
                )
    finally:
        producer.shutdown()


def consume(job, config):
    consumer = SimpleConsumer(config, job["group"], {job["topic"]: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    received = 0
    end = time.monotonic() + job.get("deadline_s", 30)
    try:
        while received < job.get("count", 1) and time.monotonic() < end:
            try:
                messages = consumer.receive(32, 15)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                emit({"receive_error": f"{type(exc).__name__}: {exc}"})
                continue
            now_ms = int(time.time() * 1000)
            for message in messages:
                received += 1
                emit(
                    {
                        "message_id": message.message_id,
                        "body": message.body.decode(),
                        "received_ms": now_ms,
                        "delivery_timestamp_ms": message.delivery_timestamp,
                    }
                )
                consumer.ack(message)
    finally:
        consumer.shutdown()


def main():
    job = json.loads(sys.argv[1])
    config = ClientConfiguration(job["endpoint"], Credentials(), request_timeout=job.get("timeout", 5))
    (send if job["mode"] == "send" else consume)(job, config)
    emit({"done": True})


if __name__ == "__main__":
    main()
