"""rocketmq-client-python 0.5.0rc2 (Apache's ctypes binding of rocketmq-client-cpp, whose wheel
bundles librocketmq.so) driven by one JSON command, for pyrmq's remoting tests.

It runs under .venv-rocketmq-cpp/bin/python (`make setup` installs the package there: its import
name, ``rocketmq``, is also the official gRPC client's in .venv), started by
tests/support/remoting_peers.py, which holds the command and event schemas. The command comes as
argv[1], else as the first line of stdin. Every event is one JSON line on stdout, {"event": ...}:
started, sent, send-error, received, check, error, done, closed. The driver stops on SIGTERM,
SIGINT or stdin's end (and a plain producer once its messages are sent, unless "linger" is set).
The C++ client logs to $HOME/logs/rocketmq-cpp, so the caller sets HOME.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
from typing import Any

from rocketmq.client import (  # type: ignore[import-untyped]
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    RecvMessage,
    TransactionMQProducer,
    TransactionStatus,
)
from rocketmq.ffi import MessageModel, dll  # type: ignore[import-untyped]

# Properties a received message is asked for (the binding cannot list them), with the command's
# "readProps"; the empty ones are left out of the event.
KNOWN_PROPERTIES = (
    "UNIQ_KEY",
    "TAGS",
    "KEYS",
    "DELAY",
    "WAIT",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "__SHARDINGKEY",
    "__transactionId__",
    "TRANSACTION_CHECK_TIMES",
)
ANSWERS = {
    "COMMIT": TransactionStatus.COMMIT,
    "ROLLBACK": TransactionStatus.ROLLBACK,
    "UNKNOWN": TransactionStatus.UNKNOWN,
}

_print_lock = threading.Lock()
stop_requested = threading.Event()


def emit(event: dict[str, Any]) -> None:
    """One event line; the client's callback threads print too."""
    with _print_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def failure(exc: BaseException) -> dict[str, Any]:
    return {"error": str(exc), "name": type(exc).__name__}


def text(value: bytes | str | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value or ""


def build_message(cmd: dict[str, Any], spec: dict[str, Any]) -> Message:
    msg = Message(spec.get("topic") or cmd["topic"])
    body = base64.b64decode(spec["bodyB64"]) if "bodyB64" in spec else spec.get("body", "").encode()
    dll.SetByteMessageBody(msg._handle, body, len(body))  # set_body stops at a NUL byte
    if spec.get("tag"):
        msg.set_tags(spec["tag"])
    if spec.get("keys"):
        msg.set_keys(" ".join(spec["keys"]))
    for key, value in (spec.get("props") or {}).items():
        msg.set_property(key, str(value))
    if spec.get("delayLevel"):
        msg.set_delay_time_level(int(spec["delayLevel"]))
    return msg


def message_event(event: str, msg: RecvMessage, read_props: list[str]) -> dict[str, Any]:
    body = msg.body or b""  # a char* in the binding: cut at the first NUL byte
    properties = {name: text(msg.get_property(name)) for name in (*KNOWN_PROPERTIES, *read_props)}
    keys = text(msg.keys)
    return {
        "event": event,
        "msgId": msg.id,
        "topic": msg.topic,
        "tags": text(msg.tags),
        "keys": keys.split(" ") if keys else [],
        "body": body.decode("utf-8", "replace"),
        "bodyB64": base64.b64encode(body).decode(),
        "properties": {name: value for name, value in properties.items() if value},
        "reconsumeTimes": msg.reconsume_times,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "broker": None,  # the binding does not say which broker a message came from
    }


def sent_event(index: int, result: Any, **more: Any) -> dict[str, Any]:
    # SendResult here is (status, msg_id, offset): the UNIQ_KEY and the queue offset; the binding
    # gives neither the queue id nor the offsetMsgId.
    return {
        "event": "sent",
        "index": index,
        "msgId": result.msg_id,
        "offsetMsgId": None,
        "queueId": None,
        "queueOffset": result.offset,
        "status": result.status.name,
        "broker": None,
        **more,
    }


def send_all(cmd: dict[str, Any], producer: Producer, transactional: bool) -> None:
    local_answer = ANSWERS[cmd.get("localAnswer", "UNKNOWN")]
    for index, spec in enumerate(cmd.get("messages") or []):
        if stop_requested.is_set():
            break
        msg = build_message(cmd, spec)
        try:
            if transactional:
                result = producer.send_message_in_transaction(msg, lambda _msg, _args: local_answer)
                emit(sent_event(index, result, localAnswer=local_answer.name))
            elif spec.get("oneway") or cmd.get("oneway"):
                producer.send_oneway(msg)
                emit({"event": "sent", "index": index, "oneway": True})
            elif spec.get("shardingKey") or cmd.get("orderly"):
                key = spec.get("shardingKey") or spec.get("keys", [""])[0] or str(index)
                emit(sent_event(index, producer.send_orderly_with_sharding_key(msg, key), shardingKey=key))
            else:
                emit(sent_event(index, producer.send_sync(msg)))
        except Exception as exc:  # noqa: BLE001 - every failed send is an event, then the next one
            emit({"event": "send-error", "index": index, **failure(exc)})
        finally:
            msg.destroy()
    emit({"event": "done"})


def make_producer(cmd: dict[str, Any]) -> tuple[Producer, bool]:
    group = cmd["group"]
    if cmd["role"] == "transaction-producer":
        check_answer = ANSWERS[cmd.get("checkAnswer", "COMMIT")]

        def check(msg: RecvMessage) -> TransactionStatus:
            event = message_event("check", msg, cmd.get("readProps") or [])
            emit({**event, "answer": check_answer.name})
            return check_answer

        producer: Producer = TransactionMQProducer(group, check, timeout=cmd.get("timeoutMs", 3000))
        return producer, True
    return Producer(group, orderly=bool(cmd.get("orderly")), timeout=cmd.get("timeoutMs", 3000)), False


def run_producer(cmd: dict[str, Any]) -> None:
    producer, transactional = make_producer(cmd)
    producer.set_namesrv_addr(cmd["nameSrv"])
    producer.start()
    emit({"event": "started", "peer": "rocketmq-client-cpp", "role": cmd["role"], "pid": os.getpid()})
    try:
        send_all(cmd, producer, transactional)
        if transactional or cmd.get("linger"):  # a transaction producer answers the broker's checks
            stop_requested.wait()
    finally:
        producer.shutdown()


def run_consumer(cmd: dict[str, Any]) -> None:
    model = MessageModel.BROADCASTING if cmd.get("model") == "BROADCASTING" else MessageModel.CLUSTERING
    consumer = PushConsumer(cmd["group"], orderly=bool(cmd.get("orderly")), message_model=model)
    consumer.set_namesrv_addr(cmd["nameSrv"])
    if cmd.get("threads"):
        consumer.set_thread_count(int(cmd["threads"]))
    count, fail_first = int(cmd.get("count", 0)), int(cmd.get("failFirst", 0))
    read_props = cmd.get("readProps") or []
    consumed = 0
    lock = threading.Lock()

    def on_message(msg: RecvMessage) -> ConsumeStatus:
        nonlocal consumed
        # Each message fails (RECONSUME_LATER) while its reconsumeTimes < failFirst.
        retry = msg.reconsume_times < fail_first
        emit({**message_event("received", msg, read_props), "result": "RETRY" if retry else "SUCCESS"})
        if retry:
            return ConsumeStatus.RECONSUME_LATER
        with lock:
            consumed += 1
            if count and consumed == count:
                emit({"event": "done"})
                stop_requested.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.subscribe(cmd["topic"], on_message, cmd.get("subExpression", "*"))
    consumer.start()
    emit({"event": "started", "peer": "rocketmq-client-cpp", "role": cmd["role"], "pid": os.getpid()})
    try:
        stop_requested.wait()
    finally:
        consumer.shutdown()


def watch_stdin() -> None:
    for _ in sys.stdin:  # commands after the first are not read; only the end matters
        pass
    stop_requested.set()


def main() -> int:
    line = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.readline()
    if not line.strip():
        emit({"event": "error", "error": "no command on argv or stdin"})
        return 2
    cmd = json.loads(line)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())
    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        if cmd["role"] in ("producer", "transaction-producer"):
            run_producer(cmd)
        elif cmd["role"] == "push-consumer":
            run_consumer(cmd)
        else:
            emit(
                {"event": "error", "error": f"no role {cmd['role']!r} (producer, transaction-producer, push-consumer)"}
            )
            return 2
    except Exception as exc:  # noqa: BLE001 - a start failure is an event and a non-zero exit
        emit({"event": "error", "where": "main", **failure(exc)})
        return 1
    emit({"event": "closed", "clean": True})
    return 0


if __name__ == "__main__":
    # The C++ client's threads may outlive shutdown(): leave without waiting for them.
    code = main()
    sys.stdout.flush()
    os._exit(code)
