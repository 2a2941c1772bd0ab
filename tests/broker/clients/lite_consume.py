"""A lite consumer of the official rocketmq-python-client, driven by commands on stdin.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python lite_consume.py '{"endpoint": "127.0.0.1:8081", "mode": "simple", "group": "G", "topic": "T"}'

mode "simple" (LiteSimpleConsumer) or "push" (LitePushConsumer: every delivery is printed as
{"pushed": {...}} and answered SUCCESS, or FAILURE for the first ``fail_first`` deliveries).
Then one JSON command per stdin line, one JSON answer per command on stdout:

* {"op": "subscribe" | "unsubscribe", "lite_topic": name} -> {"ok": true} or {"ok": false, "error", "code"}
* {"op": "subscribe_all"} (subscribe_lite_all: a COMPLETE_ADD, for a wildcard group) -> {"ok": true}
* {"op": "receive", "max": n, "invisible_s": s, "ack": bool} (simple) -> {"messages": [...]}; messages not
  acked are kept by message id for "ack" / "change"
* {"op": "ack", "ids": [...]} / {"op": "change", "id": ..., "invisible_s": s} (simple) -> {"ok": ...}
* {"op": "settings"} -> {"quota": ..., "max_lite_topic_size": ...}
* {"op": "quit"}
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, ConsumeResult, Credentials, MessageListener
from rocketmq.v5.consumer import LitePushConsumer, LiteSimpleConsumer

LOCK = threading.Lock()


def emit(record):
    with LOCK:
        print(json.dumps(record), flush=True)


def describe(message):
    return {
        "body": message.body.decode(errors="replace"),
        "lite_topic": message.lite_topic,
        "topic": message.topic,
        "message_id": message.message_id,
        "attempt": message.delivery_attempt,
        "message_type": message.message_type,
    }


class Listener(MessageListener):
    def __init__(self, fail_first):
        self.fail_left = fail_first

    def consume(self, message):
        with LOCK:
            failing = self.fail_left > 0
            self.fail_left -= 1 if failing else 0
        emit({"pushed": describe(message), "result": "FAILURE" if failing else "SUCCESS"})
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


def error(exc):
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "code", None)}


def main():
    job = json.loads(sys.argv[1])
    config = ClientConfiguration(job["endpoint"], Credentials(), request_timeout=job.get("timeout", 5))
    if job.get("mode") == "push":
        consumer = LitePushConsumer(config, job["group"], job["topic"], Listener(job.get("fail_first", 0)))
    else:
        consumer = LiteSimpleConsumer(job["topic"], config, job["group"], await_duration=job.get("await_s", 5))
    consumer.startup()
    manager = getattr(consumer, f"_{type(consumer).__name__}__subscription_manager")
    end = time.monotonic() + 10
    while manager.lite_subscription_quota == 0 and time.monotonic() < end:
        time.sleep(0.05)  # the simple consumer does not wait for the settings: its quota is 0 until then
    held = {}
    emit({"started": True, "quota": manager.lite_subscription_quota})
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            try:
                if op == "quit":
                    break
                if op == "subscribe":
                    consumer.subscribe_lite(command["lite_topic"])
                    answer = {"ok": True}
                elif op == "subscribe_all":
                    consumer.subscribe_lite_all()
                    answer = {"ok": True}
                elif op == "unsubscribe":
                    consumer.unsubscribe_lite(command["lite_topic"])
                    answer = {"ok": True}
                elif op == "receive":
                    messages = consumer.receive(command.get("max", 32), command.get("invisible_s", 15))
                    for message in messages:
                        if command.get("ack", True):
                            consumer.ack(message)
                        else:
                            held[message.message_id] = message
                    answer = {"messages": [describe(m) for m in messages]}
                elif op == "ack":
                    for message_id in command["ids"]:
                        consumer.ack(held.pop(message_id))
                    answer = {"ok": True}
                elif op == "change":
                    consumer.change_invisible_duration(held.pop(command["id"]), command["invisible_s"])
                    answer = {"ok": True}
                elif op == "settings":
                    answer = {
                        "quota": manager.lite_subscription_quota,
                        "max_lite_topic_size": manager.max_lite_topic_size,
                    }
                else:
                    answer = {"ok": False, "error": f"unknown op {op}"}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                answer = error(exc)
            emit({"answer": answer})
    finally:
        consumer.shutdown()
    emit({"done": True})


if __name__ == "__main__":
    main()
