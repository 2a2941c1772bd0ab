"""``pyrmq send``, ``pyrmq consume`` and ``pyrmq bench``: try a topic by hand from the shell. They
talk to the broker's ``apache.rocketmq.v2.MessagingService`` as a RocketMQ 5 producer and
simple consumer do (``services/v2client/client.py``); ``bench`` is in ``bench_cli.py``.

    pyrmq send TOPIC [BODY | -] [--file PATH] [--tag T] [--key K ...] [--property K=V ...]
               [--group MESSAGE_GROUP | --delay-ms N | --deliver-at TIME] [--count N]
    pyrmq consume TOPIC --group GROUP [--tag-expression EXPR | --sql EXPR] [--max N]
                  [--wait-seconds S] [--invisible-seconds S] [--no-ack]
    pyrmq bench [--topic T] [--group G] [--messages N] [--body-bytes B] [--in-flight K]
                [--batch M] [--consume | --no-consume] [--no-progress]

``send`` sends BODY (``-``: standard input; ``--file PATH``: a file's bytes) as one message per
request, ``--count N`` times (``{n}`` in the body and the keys becomes 1, 2 ... N), and prints
one row per message: its id, queue and queue offset. ``--group`` makes it a FIFO message of
that message group; ``--delay-ms`` / ``--deliver-at`` (ISO 8601, local time unless it has an
offset, or ms since the epoch) a DELAY message, parked until then (no queue or offset yet). The
queue is not in SendMessage's answer: it is looked up by message id (the admin service's
QueryMessages), "?" when that fails.

``consume`` receives with long polling as consumer group GROUP (a new group starts at each
queue's last message, or its first while the topic is fresh: the store's consume_init_mode;
``pyrmq consumer reset`` moves a group), prints each message as it arrives (id, queue and offset, delivery
attempt, tag, keys, properties, body as text if it is printable UTF-8, else a base64 preview),
and acks each batch after printing it unless ``--no-ack`` (then the messages come back after
``--invisible-seconds``, 10 s at least, with the next delivery attempt). It stops after
``--max N`` messages, or once nothing arrived for ``--wait-seconds`` (the broker waits 5 s at
least, and at most 20 s per receive).

Every command takes ``--endpoint HOST:PORT`` (default 127.0.0.1:8081), ``--timeout SECONDS``
(per call; a receive gets its long polling on top) and ``--json``: one JSON document on stdout
at the end (for ``consume`` too: ``{"topic", "group", "acked", "messages": [...]}``, bodies as
``body_text`` when UTF-8 and ``body_base64``, times as ms since the epoch). What was done
before an error or Ctrl-C is still printed.

Exit codes, as the admin commands': 0 done; 1 any other error; 2 bad usage or a request the
broker refused (ILLEGAL_TOPIC, ILLEGAL_FILTER_EXPRESSION ...: v2 codes 40000-43199 but for
access, payment and flow control); 3 not found (TOPIC_NOT_FOUND: the topic does not exist and
the broker does not create topics on demand); 4 the broker could not be reached or did not
answer; 5 not allowed (UNAUTHORIZED: no or bad --access-key/--secret-key; FORBIDDEN: the ACLs). Errors are one line on stderr; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc
from rich.console import Console

from services.admin import bench_cli
from services.admin.cli import (
    _EXIT_CODES,
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNREACHABLE,
    _error_line,
    _non_negative,
    _positive,
    _table,
    _time_text,
    common_arguments,
    epoch_ms,
    positive_float,
)
from services.v2client.client import (
    RECEIVE_BATCH_MAX,
    BrokerCallError,
    Credentials,
    V2Client,
    build_message,
    long_polling_s,
    now_ms,
    timestamp_ms,
)

EXIT_INTERRUPTED = 130
BODY_PREVIEW_CHARS = 60
BASE64_PREVIEW_CHARS = 24
QUEUE_LOOKUP_BUDGET_S = 1.0  # per command: how long to wait for sent messages to be indexed
QUEUE_LOOKUP_RETRY_S = 0.02
# 4xxxx v2 codes that are no refusal of the request's content: access, quota, flow control and
# time-outs (what clients make of each code: docs/v2-clients.md, section 2).
_NOT_INVALID = frozenset(
    {
        d.UNAUTHORIZED,
        d.PAYMENT_REQUIRED,
        d.FORBIDDEN,
        d.REQUEST_TIMEOUT,
        d.TOO_MANY_REQUESTS,
        d.LITE_TOPIC_QUOTA_EXCEEDED,
        d.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
    }
)
_NOT_FOUND = frozenset({d.NOT_FOUND, d.TOPIC_NOT_FOUND, d.CONSUMER_GROUP_NOT_FOUND})
_NO_ANSWER = frozenset({d.REQUEST_TIMEOUT, d.PROXY_TIMEOUT})

Document = dict[str, Any]
# (client, arguments, console for people or None with --json, the JSON document to fill)
Command = Callable[[V2Client, argparse.Namespace, "Console | None", Document], None]


def exit_code(code: int) -> int:
    """The exit code for a v2 status code."""
    if code in (d.UNAUTHORIZED, d.FORBIDDEN):
        return EXIT_DENIED
    if code in _NOT_FOUND:
        return EXIT_NOT_FOUND
    if code in _NO_ANSWER:
        return EXIT_UNREACHABLE
    if d.BAD_REQUEST <= code < d.INTERNAL_ERROR and code not in _NOT_INVALID:
        return EXIT_INVALID
    return EXIT_ERROR


# -- send ----------------------------------------------------------------------------------------


def send(client: V2Client, ns: argparse.Namespace, console: Console | None, document: Document) -> None:
    client.route(ns.topic)  # an unknown topic (auto-create off) fails here, before anything is sent
    rows: list[Document] = []
    document.update(topic=ns.topic, messages=rows)
    lookup = _QueueLookup(client, ns.topic)
    try:
        for n in range(1, ns.count + 1):
            message = build_message(
                ns.topic,
                _numbered(ns.body_bytes, n),
                tag=ns.tag,
                keys=[k.replace("{n}", str(n)) for k in ns.key],
                properties=dict(ns.property),
                message_group=ns.group,
                delivery_timestamp_ms=ns.deliver_at_ms,
                priority=ns.priority,
            )
            [entry] = client.send([message])
            parked = bool(entry.recall_handle)  # a future delivery time: in the timer topic until then
            rows.append(
                {
                    "message_id": entry.message_id,
                    "queue_id": None if parked else lookup.queue_id(entry.message_id),
                    "queue_offset": None if parked else entry.offset,
                    "deliver_at_ms": ns.deliver_at_ms,
                    "recall_handle": entry.recall_handle or None,
                }
            )
    finally:
        if console is not None and rows:
            _render_sent(console, rows)


def _numbered(body: bytes, n: int) -> bytes:
    return body.replace(b"{n}", str(n).encode())


class _QueueLookup:
    """A sent message's queue id, from the admin service's QueryMessages by message id (the
    index is built moments after the put). Gives up for good once ``QUEUE_LOOKUP_BUDGET_S`` of
    waiting is spent or the broker has no admin service."""

    def __init__(self, client: V2Client, topic: str) -> None:
        self._stub = admin_grpc.AdminStub(client.channel)
        self._topic = topic
        self._timeout_s = client.timeout_s
        self._budget_s = QUEUE_LOOKUP_BUDGET_S

    def queue_id(self, message_id: str) -> int | None:
        while self._budget_s > 0:
            try:
                found = self._stub.QueryMessages(
                    admin_pb.QueryMessagesRequest(topic=self._topic, message_id=message_id), timeout=self._timeout_s
                ).messages
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.NOT_FOUND:  # not indexed yet: look again
                    self._budget_s = 0
                    return None
                found = []
            for record in found:
                if record.topic == self._topic and record.message_id == message_id:
                    return record.queue_id
            time.sleep(QUEUE_LOOKUP_RETRY_S)
            self._budget_s -= QUEUE_LOOKUP_RETRY_S
        return None


def _render_sent(console: Console, rows: list[Document]) -> None:
    delayed = any(r["deliver_at_ms"] is not None for r in rows)
    table = _table("MESSAGE ID", "QUEUE", "OFFSET", *(["DELIVER AT"] if delayed else []))
    for column in table.columns[1:3]:
        column.justify = "right"
    for r in rows:
        queue = "-" if r["recall_handle"] else "?" if r["queue_id"] is None else str(r["queue_id"])
        offset = "-" if r["queue_offset"] is None else str(r["queue_offset"])
        table.add_row(
            r["message_id"],
            queue,
            offset,
            *([_time_text(r["deliver_at_ms"]) if r["deliver_at_ms"] is not None else ""] if delayed else []),
        )
    console.print(table)


# -- consume ---------------------------------------------------------------------------------------


def consume(client: V2Client, ns: argparse.Namespace, console: Console | None, document: Document) -> None:
    readable = [q for q in client.route(ns.topic) if q.permission in (d.READ, d.READ_WRITE)]
    expression, sql = (ns.sql, True) if ns.sql is not None else (ns.tag_expression, False)
    messages: list[Document] = []
    document.update(topic=ns.topic, group=ns.group, acked=not ns.no_ack, messages=messages)
    idle_until = time.monotonic() + ns.wait_seconds
    while ns.max is None or len(messages) < ns.max:
        batch = RECEIVE_BATCH_MAX if ns.max is None else min(RECEIVE_BATCH_MAX, ns.max - len(messages))
        got = client.receive(
            ns.group,
            ns.topic,
            expression,
            sql=sql,
            batch_size=batch,
            invisible_s=ns.invisible_seconds,
            queue=readable[0] if readable else None,
            wait_s=max(0.0, idle_until - time.monotonic()),
        )
        if not got:
            if time.monotonic() >= idle_until:
                break
            continue
        docs = [_message_doc(m) for m in got]
        messages += docs
        if console is not None:
            for m in docs:
                console.print(_message_line(m))
        if not ns.no_ack:
            client.ack(ns.group, ns.topic, got)
            for m in docs:
                m["acked"] = True
        idle_until = time.monotonic() + ns.wait_seconds
    if console is not None:
        console.print(_consume_summary(ns, len(messages)))


def _consume_summary(ns: argparse.Namespace, count: int) -> str:
    if not count:
        return f"No message arrived within {long_polling_s(ns.wait_seconds):g} s."
    what = f"{count} message{'s' if count != 1 else ''} received"
    if ns.no_ack:
        return f"{what}, not acked: redelivered after {ns.invisible_seconds:g} s."
    return f"{what} and acked."


def _message_doc(m: d.Message) -> Document:
    sp = m.system_properties
    try:
        body_text: str | None = m.body.decode("utf-8")
    except UnicodeDecodeError:
        body_text = None
    return {
        "message_id": sp.message_id,
        "topic": m.topic.name,
        "queue_id": sp.queue_id,
        "queue_offset": sp.queue_offset,
        "tag": sp.tag if sp.HasField("tag") else None,
        "keys": list(sp.keys),
        "message_group": sp.message_group if sp.HasField("message_group") else None,
        "priority": sp.priority if sp.HasField("priority") else None,
        "properties": dict(sorted(m.user_properties.items())),
        "message_type": d.MessageType.Name(sp.message_type),
        "delivery_attempt": sp.delivery_attempt,
        "born_timestamp_ms": timestamp_ms(sp.born_timestamp),
        "born_host": sp.born_host,
        "store_timestamp_ms": timestamp_ms(sp.store_timestamp),
        "delivery_timestamp_ms": timestamp_ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None,
        "body_size_bytes": len(m.body),
        "body_text": body_text,
        "body_base64": base64.b64encode(m.body).decode("ascii"),
        "acked": False,
    }


def _message_line(m: Document) -> str:
    parts = [
        m["message_id"],
        f"queue={m['queue_id']}",
        f"offset={m['queue_offset']}",
        f"attempt={m['delivery_attempt']}",
        f"tag={m['tag'] or '-'}",
        f"keys={','.join(m['keys']) or '-'}",
    ]
    if m["message_group"]:
        parts.append(f"group={m['message_group']}")
    if m["priority"] is not None:
        parts.append(f"priority={m['priority']}")
    if m["properties"]:
        parts.append("props=" + ",".join(f"{k}={v}" for k, v in m["properties"].items()))
    if m["delivery_timestamp_ms"] is not None:
        parts.append(f"deliver-at={_time_text(m['delivery_timestamp_ms'])}")
    return "  ".join(parts) + "  body: " + _body_preview(m)


def _body_preview(m: Document) -> str:
    text = m["body_text"]
    if text is not None and all(ch.isprintable() or ch in "\t\r\n" for ch in text):
        text = " ".join(text.split("\n"))
        return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 1] + "…"
    encoded = m["body_base64"]
    if len(encoded) > BASE64_PREVIEW_CHARS:
        encoded = encoded[:BASE64_PREVIEW_CHARS] + "…"
    return f"base64:{encoded} ({m['body_size_bytes']} bytes)"


# -- running a command -----------------------------------------------------------------------------


def _broker_error_line(exc: BrokerCallError, ns: argparse.Namespace) -> str:
    topic = getattr(ns, "topic", "")
    if exc.code == d.TOPIC_NOT_FOUND:
        return (
            f"topic {topic} does not exist, and the broker does not create topics on demand "
            f"(pyrmq topic create {topic} --type NORMAL)"
        )
    name = d.Code.Name(exc.code) if exc.code in d.Code.values() else str(exc.code)
    return f"{name}: {' '.join(exc.status_message.split())}"


def _run(command: Command) -> Callable[[argparse.Namespace], int]:
    def run(ns: argparse.Namespace) -> int:
        if (check := getattr(ns, "check", None)) is not None:
            check(ns)  # argument rules argparse cannot express; exits 2 with the usage
        document: Document = {}
        # Not a terminal (a pipe, a file): never wrap or cut a line at 80 characters.
        console = (
            None
            if ns.json
            else Console(markup=False, highlight=False, emoji=False, width=None if sys.stdout.isatty() else 1_000)
        )
        code, error = EXIT_OK, None
        try:
            with V2Client(
                ns.endpoint,
                ns.timeout,
                credentials=Credentials(ns.access_key, ns.secret_key),
                tls=ns.tls,
                ca_file=ns.ca_file,
            ) as client:
                command(client, ns, console, document)
        except BrokerCallError as exc:
            code, error = exit_code(exc.code), _broker_error_line(exc, ns)
        except grpc.RpcError as exc:
            code, error = _EXIT_CODES.get(exc.code(), EXIT_ERROR), _error_line(exc, ns.endpoint)
        except bench_cli.BenchError as exc:
            code, error = EXIT_ERROR, str(exc)
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        if ns.json and (code == EXIT_OK or any(document.get(k) for k in ("messages", "sent"))):
            print(json.dumps(document, indent=2))
        if error is not None:
            print(f"pyrmq: error: {error}", file=sys.stderr)
        return code

    return run


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``send``, ``consume`` and ``bench`` to ``pyrmq``'s subcommands; each sets ``run``
    (namespace -> exit code)."""
    common = common_arguments("print one JSON document instead of text")

    def command(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(run=_run(run))
        return parser

    sender = command(
        "send", send, "send a message (or --count copies) to a topic; prints each one's id, queue and offset"
    )
    sender.add_argument("topic", metavar="TOPIC")
    sender.add_argument(
        "body",
        metavar="BODY",
        nargs="?",
        help="the message body; '-' reads it from standard input ({n}: the copy's number)",
    )
    sender.add_argument("--file", type=Path, metavar="PATH", help="send this file's bytes as the body")
    sender.add_argument("--tag", help="the message tag (what --tag-expression filters on)")
    sender.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="K",
        help="a message key (pyrmq message query --key); repeat for several",
    )
    sender.add_argument(
        "--property",
        action="append",
        default=[],
        type=_property,
        metavar="K=V",
        help="a user property (what --sql filters on); repeat for several",
    )
    sender.add_argument(
        "--group",
        metavar="MESSAGE_GROUP",
        help="send FIFO messages of this message group (kept in order, on one queue)",
    )
    sender.add_argument(
        "--priority",
        type=_non_negative,
        metavar="P",
        help="send PRIORITY messages of priority P (a PRIORITY topic: larger is more urgent, stored at level "
        "min(P, max priority))",
    )
    when = sender.add_mutually_exclusive_group()
    when.add_argument("--delay-ms", type=_positive, metavar="N", help="deliver N ms from now (a DELAY message)")
    when.add_argument(
        "--deliver-at",
        type=epoch_ms,
        metavar="TIME",
        help="deliver at TIME: ISO 8601 (local time unless it has an offset) or ms since the epoch",
    )
    sender.add_argument(
        "--count",
        type=_positive,
        default=1,
        metavar="N",
        help="send N messages, one request each ({n} in BODY and keys: 1..N; default 1)",
    )

    def check_send(ns: argparse.Namespace) -> None:
        if (ns.body is None) == (ns.file is None):
            sender.error("give the body as BODY ('-' for standard input) or --file PATH (one of them)")
        if ns.group is not None and (ns.delay_ms or ns.deliver_at):
            sender.error("--group (FIFO) and --delay-ms/--deliver-at (DELAY) are exclusive")
        if ns.priority is not None and (ns.group is not None or ns.delay_ms or ns.deliver_at):
            sender.error("--priority (PRIORITY) is exclusive with --group (FIFO) and --delay-ms/--deliver-at (DELAY)")
        try:
            ns.body_bytes = (
                ns.file.read_bytes()
                if ns.file is not None
                else sys.stdin.buffer.read()
                if ns.body == "-"
                else ns.body.encode("utf-8")
            )
        except OSError as exc:
            sender.error(f"cannot read {ns.file}: {exc.strerror}")
        ns.deliver_at_ms = now_ms() + ns.delay_ms if ns.delay_ms else ns.deliver_at

    sender.set_defaults(check=check_send)

    consumer = command("consume", consume, "receive messages as a consumer group (long polling), print and ack them")
    consumer.add_argument("topic", metavar="TOPIC")
    consumer.add_argument("--group", required=True, help="the consumer group (created on its first receive)")
    expression = consumer.add_mutually_exclusive_group()
    expression.add_argument(
        "--tag-expression",
        default="*",
        metavar="EXPR",
        help="only these tags: 'TagA || TagB' (default '*': every message)",
    )
    expression.add_argument(
        "--sql",
        metavar="EXPR",
        help="only messages matching this SQL92 expression over their properties and TAGS, e.g. \"color = 'red'\"",
    )
    consumer.add_argument("--max", type=_positive, metavar="N", help="stop after N messages (default: no limit)")
    consumer.add_argument(
        "--wait-seconds",
        type=_non_negative_float,
        default=5.0,
        metavar="S",
        help="stop when nothing arrived for S seconds (at least 5; default %(default)s)",
    )
    consumer.add_argument(
        "--invisible-seconds",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="a received message stays hidden from the group this long unless acked "
        "(10 s to 12 h; default %(default)s)",
    )
    consumer.add_argument(
        "--no-ack", action="store_true", help="do not ack: the messages are delivered again after --invisible-seconds"
    )

    bench_cli.add_arguments(command("bench", bench_cli.bench, bench_cli.HELP))


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text}")
    return key, value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return value
