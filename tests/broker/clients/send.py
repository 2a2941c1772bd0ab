"""Send messages with the official rocketmq-python-client and print one JSON line per message.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python send.py '{"endpoint": "127.0.0.1:8081", "topics": ["T"], "messages": [{...}, ...]}'

Message fields: topic, body (text) or body_size (bytes of "x"), tag, keys (list),
properties (dict), message_group, delivery_timestamp (seconds, as the client takes it), priority, lite_topic,
transaction ("commit" or "rollback": send as a half message, then end the transaction;
"open": send the half message and leave the transaction open, for the server's check).
Job options: ak, sk (credentials, default none); tls (connect with TLS, trusting grpc's default
roots); checker ("commit", the default, "rollback" or "unknown"): what the producer's
TransactionChecker answers a server check (RecoverOrphanedTransactionCommand); linger_s: keep
the producer running this long after the sends so it can answer checks; linger_checks: stop
lingering once it answered this many checks.
Output per message: {"ok": true, "message_id", "transaction_id", "offset", "recall_handle"}
or {"ok": false, "error": class name, "message": str, "code": code or null}; per check
answered (while lingering, possibly interleaved): {"checked": message_id, "answer": "commit"}.
A last line {"settings": {...}} reports what the producer learned from the server's settings
reply.
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

ANSWERS = {
    "commit": TransactionResolution.COMMIT,
    "rollback": TransactionResolution.ROLLBACK,
    "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
}
OUTPUT = threading.Lock()


def emit(record):
    with OUTPUT:
        print(json.dumps(record), flush=True)


class Checker(TransactionChecker):
    def __init__(self, answer="commit"):
        self.answer = answer
        self.checks = 0
        self.changed = threading.Condition()

    def check(self, message):
        emit({"checked": message.message_id, "answer": self.answer})
        with self.changed:
            self.checks += 1
            self.changed.notify_all()
        return ANSWERS[self.answer]

    def wait_checks(self, count, timeout_s):
        end = time.monotonic() + timeout_s
        with self.changed:
            while self.checks < count and time.monotonic() < end:
                self.changed.wait(end - time.monotonic())


CommitChecker = Checker  # the name earlier tests know


def build(spec):
    message = Message()
    message.topic = spec["topic"]
    message.body = spec["body"].encode() if "body" in spec else b"x" * spec["body_size"]
    if spec.get("tag"):
        message.tag = spec["tag"]
    for key in spec.get("keys", []):
        message.keys = key
    for name, value in spec.get("properties", {}).items():
        message.add_property(name, value)
    if spec.get("message_group"):
        message.message_group = spec["message_group"]
    if spec.get("delivery_timestamp"):
        message.delivery_timestamp = spec["delivery_timestamp"]
    if spec.get("priority") is not None:
        message.priority = spec["priority"]
    if spec.get("lite_topic"):
        message.lite_topic = spec["lite_topic"]
    return message


def main():
    job = json.loads(sys.argv[1])
    checker = Checker(job.get("checker", "commit"))
    producer = Producer(
        ClientConfiguration(
            job["endpoint"], Credentials(job.get("ak", ""), job.get("sk", "")), request_timeout=job.get("timeout", 5)
        ),
        tuple(job.get("topics", ())),
        checker=checker,
        tls_enable=bool(job.get("tls")),  # trusts grpc's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)
    )
    producer.startup()
    try:
        for spec in job["messages"]:
            try:
                if spec.get("transaction"):
                    transaction = producer.begin_transaction()
                    receipt = producer.send(build(spec), transaction)
                    if spec["transaction"] == "commit":
                        transaction.commit()
                    elif spec["transaction"] == "rollback":
                        transaction.rollback()
                else:
                    receipt = producer.send(build(spec))
                result = {
                    "ok": True,
                    "message_id": receipt.message_id,
                    "transaction_id": receipt.transaction_id,
                    "offset": receipt.offset,
                    "recall_handle": receipt.recall_handle,
                }
            except Exception as exc:  # noqa: BLE001 - reported to the test
                result = {
                    "ok": False,
                    "error": type(exc).__name__,
                    "message": str(exc),
                    "code": getattr(exc, "code", None),
                }
            emit(result)
        if job.get("linger_s"):
            checker.wait_checks(job.get("linger_checks", 1 << 30), job["linger_s"])
            time.sleep(0.5)  # let the last answer's EndTransaction go out
        # name-mangled privates of Producer: what the settings reply set
        emit(
            {
                "settings": {
                    "max_body_size": producer._Producer__max_body_size,
                    "validate_message_type": producer._Producer__validate_message_type,
                    "max_attempts": producer._Producer__backoff_policy.max_attempts,
                }
            }
        )
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
