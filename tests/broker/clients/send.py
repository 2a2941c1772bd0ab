"""Send messages with the official rocketmq-python-client and print one JSON line per message.

Run in a subprocess (its apache.rocketmq.v2 stubs clash with ours in one process):

    python send.py '{"endpoint": "127.0.0.1:8081", "topics": ["T"], "messages": [{...}, ...]}'

Message fields: topic, body (text) or body_size (bytes of "x"), tag, keys (list),
properties (dict), message_group, delivery_timestamp (seconds, as the client takes it),
transaction ("commit" or "rollback": send as a half message, then end the transaction).
Output per message: {"ok": true, "message_id", "transaction_id", "offset", "recall_handle"}
or {"ok": false, "error": class name, "message": str, "code": code or null}. A last line
{"settings": {...}} reports what the producer learned from the server's settings reply.
"""
import json
import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution


class CommitChecker(TransactionChecker):
    def check(self, message):
        return TransactionResolution.COMMIT


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
    return message


def main():
    job = json.loads(sys.argv[1])
    producer = Producer(ClientConfiguration(job["endpoint"], Credentials(), request_timeout=job.get("timeout", 5)),
                        tuple(job.get("topics", ())), checker=CommitChecker())
    producer.startup()
    try:
        for spec in job["messages"]:
            try:
                if spec.get("transaction"):
                    transaction = producer.begin_transaction()
                    receipt = producer.send(build(spec), transaction)
                    transaction.commit() if spec["transaction"] == "commit" else transaction.rollback()
                else:
                    receipt = producer.send(build(spec))
                result = {"ok": True, "message_id": receipt.message_id, "transaction_id": receipt.transaction_id,
                          "offset": receipt.offset, "recall_handle": receipt.recall_handle}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                result = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                          "code": getattr(exc, "code", None)}
            print(json.dumps(result), flush=True)
        # name-mangled privates of Producer: what the settings reply set
        print(json.dumps({"settings": {
            "max_body_size": producer._Producer__max_body_size,
            "validate_message_type": producer._Producer__validate_message_type,
            "max_attempts": producer._Producer__backoff_policy.max_attempts}}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
