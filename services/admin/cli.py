"""``pyrmq group|consumer|message ...``: the admin commands, a client of the broker's
``pyrmq.admin.v1.Admin`` gRPC service (protos/pyrmq/admin/v1/admin.proto).

    pyrmq group create|update NAME [--fifo | --no-fifo] [--max-delivery-attempts N]
          [--attribute KEY=VALUE ...] [--remove-attribute KEY ...]
          [--retry-policy default | --backoffs D,D,... |
           --initial-backoff D --max-backoff D --backoff-multiplier N]
    pyrmq group list [--all]
    pyrmq consumer progress GROUP [--topic T]
    pyrmq consumer reset GROUP --topic T (--to-timestamp TS | --to-offset earliest|latest|N)
    pyrmq message query --topic T --key K
    pyrmq message query --id ID [--topic T]

(``pyrmq topic`` is in topic_cli.py, ``pyrmq status`` in status.py, ``pyrmq send|consume|bench``
in client_cli.py.)

``group create`` creates a group or changes an existing one; ``group update`` only changes an
existing one (NOT_FOUND otherwise). An option left out keeps the stored value. The retry policy
(the delay before each redelivery, sent to consumers in their settings): ``--backoffs 1s,5s,30s``
(customized: the delay after the 1st, 2nd, 3rd failed delivery; the last repeats),
``--initial-backoff 1s --max-backoff 1m --backoff-multiplier 2`` (exponential; an option left
out takes RocketMQ's 5s, 2h, 2), ``--retry-policy default`` (RocketMQ's default: 1s 5s 10s 30s
1m 2m ... 2h). ``--retry-policy customized|exponential`` may name the kind explicitly. A
duration D is a number with a unit (``500ms``, ``1s``, ``2m``, ``1h``) or bare milliseconds.

Every command takes ``--endpoint HOST:PORT`` (the broker, default 127.0.0.1:8081),
``--timeout SECONDS`` and ``--json``. Output is a table for people; ``--json`` prints one JSON
document on stdout instead (numbers as numbers, bodies as base64, times as ms since the epoch).

Exit codes: 0 done; 1 any other error; 2 bad usage or an argument the broker refused
(INVALID_ARGUMENT); 3 not found (NOT_FOUND); 4 the broker or its store could not be reached or
did not answer (UNAVAILABLE, DEADLINE_EXCEEDED); 5 not allowed: no or bad credentials
(UNAUTHENTICATED) or a user the ACLs do not allow (PERMISSION_DENIED). Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from rich import box
from rich.console import Console
from rich.table import Table

from services.admin.retry_policy_cli import (
    add_retry_policy_options,
    check_retry_policy,
    retry_policy_doc,
    retry_policy_request,
    retry_policy_text,
)
from services.domain.topic_types import TOPIC_MESSAGE_TYPES
from services.v2client.client import Credentials, open_channel

DEFAULT_ENDPOINT = "127.0.0.1:8081"
DEFAULT_TIMEOUT_S = 10.0
MESSAGE_TYPES = TOPIC_MESSAGE_TYPES
BODY_PREVIEW_CHARS = 40
_NUMERIC_COLUMNS = frozenset(
    {
        "QUEUE",
        "READ QUEUES",
        "WRITE QUEUES",
        "MAX DELIVERY ATTEMPTS",
        "MIN OFFSET",
        "BROKER OFFSET",
        "CONSUMER OFFSET",
        "QUEUE OFFSET",
        "OLD OFFSET",
        "NEW OFFSET",
        "LAG",
    }
)
EXIT_OK, EXIT_ERROR, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_UNREACHABLE, EXIT_DENIED = 0, 1, 2, 3, 4, 5
_EXIT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_INVALID,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNREACHABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNREACHABLE,
    grpc.StatusCode.UNAUTHENTICATED: EXIT_DENIED,
    grpc.StatusCode.PERMISSION_DENIED: EXIT_DENIED,
}

_RESET_POSITIONS = {"earliest": pb.RESET_POSITION_EARLIEST, "latest": pb.RESET_POSITION_LATEST}

Document = dict[str, Any]
Render = Callable[[Console], None]
Command = Callable[[pb_grpc.AdminStub, argparse.Namespace], tuple[Document, Render]]


# -- commands: each calls one RPC and returns (JSON document, how to render it) -------------------


def group_create(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    request = pb.CreateGroupRequest(
        name=ns.name, max_delivery_attempts=ns.max_delivery_attempts or 0, must_exist=ns.must_exist
    )
    if ns.fifo is not None:
        request.fifo = ns.fifo
    if (policy := retry_policy_request(ns)) is not None:
        request.retry_policy.CopyFrom(policy)
    request.attributes.update(dict(ns.attribute or ()))
    request.removed_attributes.extend(ns.remove_attribute or ())
    response = stub.CreateGroup(request, timeout=ns.timeout)
    group = _group_doc(response.group)

    def render(console: Console) -> None:
        console.print(
            f"{'Created' if response.created else 'Updated'} group {group['name']}: "
            f"{'FIFO' if group['fifo'] else 'not FIFO'}, "
            f"{group['max_delivery_attempts']} delivery attempts before the DLQ, "
            f"retry policy {retry_policy_text(group['retry_policy'])}"
            + (f", attributes {_attributes_text(group['attributes'])}." if group["attributes"] else ".")
        )

    return {"created": response.created, "group": group}, render


def group_list(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    groups = [
        _group_doc(g) for g in stub.ListGroups(pb.ListGroupsRequest(include_system=ns.all), timeout=ns.timeout).groups
    ]

    def render(console: Console) -> None:
        table = _table(
            "GROUP", "FIFO", "MAX DELIVERY ATTEMPTS", "RETRY POLICY", "ATTRIBUTES", *(["SYSTEM"] if ns.all else [])
        )
        for g in groups:
            table.add_row(
                g["name"],
                "yes" if g["fifo"] else "no",
                str(g["max_delivery_attempts"]),
                retry_policy_text(g["retry_policy"]),
                _attributes_text(g["attributes"]),
                *(["yes" if g["system"] else ""] if ns.all else []),
            )
        _print_table(console, table, groups, "No consumer groups.")

    return {"groups": groups}, render


def consumer_progress(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    response = stub.GetConsumerProgress(
        pb.GetConsumerProgressRequest(group=ns.group, topic=ns.topic or ""), timeout=ns.timeout
    )
    queues = [
        {
            "topic": q.topic,
            "broker_name": q.broker_name,
            "queue_id": q.queue_id,
            "min_offset": q.min_offset,
            "broker_offset": q.broker_offset,
            "consumer_offset": q.consumer_offset,
            "lag": q.lag,
        }
        | ({"lite_topic": q.lite_topic} if q.lite_topic else {})
        for q in response.queues
    ]
    unreachable = list(response.unreachable_broker_groups)
    document = {
        "group": response.group,
        "total_lag": response.total_lag,
        "queues": queues,
        "unreachable_broker_groups": unreachable,
    }

    def render(console: Console) -> None:
        if not queues:
            console.print(f"Group {response.group} has no consumer offsets yet (--topic TOPIC shows a topic's queues).")
            return
        console.print(f"Consumer group {response.group}")
        lite = ["LITE TOPIC"] if any("lite_topic" in q for q in queues) else []
        table = _table("TOPIC", *lite, "BROKER", "QUEUE", "MIN OFFSET", "BROKER OFFSET", "CONSUMER OFFSET", "LAG")
        for q in queues:
            consumer_offset = str(q["consumer_offset"]) if q["consumer_offset"] >= 0 else "-"
            table.add_row(
                q["topic"],
                *[q.get("lite_topic", "-") for _ in lite],
                q["broker_name"],
                str(q["queue_id"]),
                str(q["min_offset"]),
                str(q["broker_offset"]),
                consumer_offset,
                str(q["lag"]),
            )
        console.print(table)
        console.print(f"Total lag: {response.total_lag}")
        _print_unreachable(console, unreachable)

    return document, render


def consumer_reset(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    request = pb.ResetConsumerOffsetRequest(group=ns.group, topic=ns.topic)
    if ns.to_timestamp is not None:
        request.timestamp_ms = ns.to_timestamp
    elif ns.to_offset in _RESET_POSITIONS:
        request.position = _RESET_POSITIONS[ns.to_offset]
    else:
        request.offset = int(ns.to_offset)
    response = stub.ResetConsumerOffset(request, timeout=ns.timeout)
    queues = [
        {"broker_name": q.broker_name, "queue_id": q.queue_id, "old_offset": q.old_offset, "new_offset": q.new_offset}
        for q in response.queues
    ]
    document = {"group": response.group, "topic": response.topic, "queues": queues}

    def render(console: Console) -> None:
        console.print(f"Reset consumer group {response.group} on topic {response.topic}")
        table = _table("BROKER", "QUEUE", "OLD OFFSET", "NEW OFFSET")
        for q in queues:
            old = str(q["old_offset"]) if q["old_offset"] >= 0 else "-"
            table.add_row(q["broker_name"], str(q["queue_id"]), old, str(q["new_offset"]))
        _print_table(console, table, queues, f"Topic {response.topic} has no read queues.")

    return document, render


def message_query(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    request = pb.QueryMessagesRequest(
        topic=ns.topic or "", key=ns.key or "", message_id=ns.id or "", max_num=ns.max or 0
    )
    response = stub.QueryMessages(request, timeout=ns.timeout)
    messages = [_message_doc(m) for m in response.messages]
    unreachable = list(response.unreachable_broker_groups)

    def render(console: Console) -> None:
        if ns.id:  # usually one message (or its retry / DLQ copies): every field
            for m in messages:
                _print_message_details(console, m)
            _print_unreachable(console, unreachable)
            return
        table = _table("MESSAGE ID", "TOPIC", "BROKER", "QUEUE", "QUEUE OFFSET", "TAG", "KEYS", "STORE TIME", "BODY")
        for m in messages:
            table.add_row(
                m["message_id"],
                m["topic"],
                m["broker_name"],
                str(m["queue_id"]),
                str(m["queue_offset"]),
                m["tag"],
                " ".join(m["keys"]),
                _time_text(m["store_timestamp_ms"]),
                _body_preview(m),
            )
        _print_table(console, table, messages, f"No message of topic {ns.topic} has key {ns.key}.")
        _print_unreachable(console, unreachable)

    return {"messages": messages, "unreachable_broker_groups": unreachable}, render


def _print_unreachable(console: Console, groups: list[str]) -> None:
    """A partial answer says so: the broker groups whose store did not answer."""
    if groups:
        console.print(f"Not included: broker group(s) {', '.join(groups)} did not answer.")


# -- documents and rendering -----------------------------------------------------------------------


def _group_doc(group: pb.Group) -> Document:
    return {
        "name": group.name,
        "fifo": group.fifo,
        "max_delivery_attempts": group.max_delivery_attempts,
        "system": group.system,
        "retry_policy": retry_policy_doc(group.retry_policy),
        "attributes": dict(sorted(group.attributes.items())),
    }


def _attributes_text(attributes: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in attributes.items())


def _message_doc(m: pb.MessageRecord) -> Document:
    try:
        body_text: str | None = m.body.decode("utf-8")
    except UnicodeDecodeError:
        body_text = None
    return {
        "message_id": m.message_id,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "broker_name": m.broker_name,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "phy_offset": m.phy_offset,
        "tag": m.tag,
        "keys": list(m.keys),
        "born_timestamp_ms": m.born_timestamp_ms,
        "store_timestamp_ms": m.store_timestamp_ms,
        "born_host": m.born_host,
        "store_host": m.store_host,
        "reconsume_times": m.reconsume_times,
        "properties": dict(sorted(m.properties.items())),
        "body_size_bytes": len(m.body),
        "body_text": body_text,
        "body_base64": base64.b64encode(m.body).decode("ascii"),
    }


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMERIC_COLUMNS else "left")
    return table


def _print_table(console: Console, table: Table, rows: Sequence[object], empty: str) -> None:
    console.print(table if rows else empty)


def _print_message_details(console: Console, m: Document) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, show_header=False)
    table.add_column("FIELD", style="bold")
    table.add_column("VALUE")
    for name, value in (
        ("Message ID", m["message_id"]),
        ("Offset message ID", m["offset_msg_id"]),
        ("Topic", m["topic"]),
        ("Broker", m["broker_name"]),
        ("Queue", str(m["queue_id"])),
        ("Queue offset", str(m["queue_offset"])),
        ("Tag", m["tag"]),
        ("Keys", " ".join(m["keys"])),
        ("Born", f"{_time_text(m['born_timestamp_ms'])} from {m['born_host']}"),
        ("Stored", f"{_time_text(m['store_timestamp_ms'])} at {m['store_host']}"),
        ("Reconsume times", str(m["reconsume_times"])),
        ("Body", f"{_body_preview(m)} ({m['body_size_bytes']} bytes)"),
    ):
        table.add_row(name, value)
    table.add_row("Properties", "" if m["properties"] else "-")
    for key, value in m["properties"].items():
        table.add_row(f"  {key}", value)
    console.print(table)


def _perm_text(perm: int) -> str:
    return {6: "read-write", 4: "read-only", 2: "write-only", 0: "none"}.get(perm & 6, str(perm))


def _time_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if ms > 0 else "-"


def _body_preview(m: Document) -> str:
    text = m["body_text"]
    if text is None:
        return f"<{m['body_size_bytes']} bytes, not UTF-8>"
    text = text.replace("\n", " ")
    return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 1] + "…"


# -- running a command -----------------------------------------------------------------------------


def _error_line(exc: grpc.RpcError, endpoint: str) -> str:
    code, details = exc.code(), " ".join((exc.details() or "").split())
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return f"{endpoint} does not serve pyrmq.admin.v1.Admin (is it a pyrmq broker?)"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return f"{endpoint}: {code.name}: {details}"
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
        return details
    return f"{code.name}: {details}"


def _run(command: Command) -> Callable[[argparse.Namespace], int]:
    def run(ns: argparse.Namespace) -> int:
        if (check := getattr(ns, "check", None)) is not None:
            check(ns)  # argument rules argparse cannot express; exits 2 with the usage
        try:
            with channel_of(ns) as channel:
                document, render = command(pb_grpc.AdminStub(channel), ns)
        except grpc.RpcError as exc:
            print(f"pyrmq: error: {_error_line(exc, ns.endpoint)}", file=sys.stderr)
            return _EXIT_CODES.get(exc.code(), EXIT_ERROR)
        if ns.json:
            print(json.dumps(document, indent=2))
        else:
            # Not a terminal (a pipe, a file): never wrap or cut a column at 80 characters.
            console = Console(markup=False, highlight=False, emoji=False, width=None if sys.stdout.isatty() else 1_000)
            render(console)
        return EXIT_OK

    return run


def add_leaf(
    common: argparse.ArgumentParser,
    parent: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    command: Command,
    help_text: str,
) -> argparse.ArgumentParser:
    """A command under ``parent`` taking the ``common`` options, whose ``run`` calls ``command``."""
    parser = parent.add_parser(name, parents=[common], help=help_text, description=help_text)
    parser.set_defaults(run=_run(command))
    return parser


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``group``, ``consumer`` and ``message`` to ``pyrmq``'s subcommands; each
    leaf sets ``run`` (namespace -> exit code)."""
    common = common_arguments()

    leaf = functools.partial(add_leaf, common)

    group = commands.add_parser("group", help="create, update and list consumer groups").add_subparsers(
        dest="group_command", required=True, metavar="{create,update,list}"
    )
    for verb, help_text in (
        ("create", "create a consumer group, or change its settings"),
        ("update", "change the settings of an existing consumer group"),
    ):
        _add_group_options(leaf(group, verb, group_create, help_text), must_exist=verb == "update")
    listing = leaf(group, "list", group_list, "list consumer groups")
    listing.add_argument("--all", action="store_true", help="include system groups")

    consumer = commands.add_parser("consumer", help="consumer group progress and resets").add_subparsers(
        dest="consumer_command", required=True, metavar="{progress,reset}"
    )
    progress = leaf(consumer, "progress", consumer_progress, "a consumer group's offsets and lag, per queue")
    progress.add_argument("group", metavar="GROUP")
    progress.add_argument("--topic", help="only this topic (default: every topic the group has consumed)")
    reset = leaf(consumer, "reset", consumer_reset, "move a consumer group's offset in every queue of a topic")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True, help="the topic: every read queue of it is reset")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to-timestamp",
        type=epoch_ms,
        metavar="TS",
        help="the first message stored at or after TS: ms since the epoch or ISO 8601 (naive: local time)",
    )
    to.add_argument(
        "--to-offset",
        type=_reset_offset,
        metavar="earliest|latest|N",
        help="each queue's min or max offset, or offset N (kept within each queue's min and max)",
    )

    message = commands.add_parser("message", help="find messages").add_subparsers(
        dest="message_command", required=True, metavar="{query}"
    )
    query = leaf(message, "query", message_query, "find messages by key (--topic and --key) or by message id (--id)")
    by = query.add_mutually_exclusive_group(required=True)
    by.add_argument("--key", help="a message key (one of KEYS) or a UNIQ_KEY; needs --topic")
    by.add_argument("--id", help="a message id (the client's) or an offset message id")
    query.add_argument("--topic", help="the topic (required with --key; narrows an --id search)")
    query.add_argument("--max", type=_positive, metavar="N", help="at most N messages, up to 64 (default 32)")

    def check_query(ns: argparse.Namespace) -> None:
        if ns.key is not None and not ns.topic:
            query.error("--key needs --topic")

    query.set_defaults(check=check_query)


def common_arguments(json_help: str = "print one JSON document instead of a table") -> argparse.ArgumentParser:
    """``--endpoint``, ``--json`` and ``--timeout``, which every command against the broker takes
    (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--endpoint",
        default=DEFAULT_ENDPOINT,
        metavar="HOST:PORT",
        help="the broker's gRPC address (default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help=json_help)
    common.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="give up on a call after this long (default %(default)s)",
    )
    common.add_argument(
        "--access-key",
        default=os.environ.get("PYRMQ_ACCESS_KEY", ""),
        metavar="AK",
        help="sign calls as this user, when the broker has authentication on (default $PYRMQ_ACCESS_KEY)",
    )
    common.add_argument(
        "--secret-key",
        default=os.environ.get("PYRMQ_SECRET_KEY", ""),
        metavar="SK",
        help="the user's secret key (default $PYRMQ_SECRET_KEY; prefer the variable: a flag shows in the process list)",
    )
    common.add_argument("--tls", action="store_true", help="connect with TLS (tls_mode both, the default, or tls)")
    common.add_argument("--ca-file", metavar="PEM", help=CA_FILE_HELP)
    return common


def channel_of(ns: argparse.Namespace) -> grpc.Channel:
    """A channel to ``--endpoint`` with the command's TLS and credentials."""
    return open_channel(ns.endpoint, Credentials(ns.access_key, ns.secret_key), ns.tls, ns.ca_file)


CA_FILE_HELP = (
    "with --tls: trust this CA or certificate (default: the system's roots; pyrmq up's: DATA_DIR/broker/tls/broker.crt)"
)


def positive_float(text: str) -> float:
    """An argparse type: a number of seconds (or similar) above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def epoch_ms(text: str) -> int:
    """An argparse type: ms since the epoch, as digits or an ISO 8601 time (naive: local time)."""
    if text.isdigit():
        return int(text)
    try:
        return round(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"neither ms since the epoch nor an ISO 8601 time: {text}") from None


def _reset_offset(text: str) -> str:
    if text.lower() in _RESET_POSITIONS:
        return text.lower()
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not earliest, latest or an offset: {text}")
    return text


def _add_group_options(parser: argparse.ArgumentParser, must_exist: bool) -> None:
    parser.set_defaults(must_exist=must_exist, check=lambda ns: check_retry_policy(parser, ns))
    parser.add_argument("name", metavar="NAME")
    parser.add_argument(
        "--fifo",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deliver each message group in order (default: off for a new group, unchanged for an existing one)",
    )
    parser.add_argument(
        "--max-delivery-attempts",
        type=_positive,
        metavar="N",
        help="deliveries before a message goes to the DLQ (default: 17 for a new group, unchanged for an existing one)",
    )
    add_retry_policy_options(parser)
    parser.add_argument(
        "--attribute",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="set a group attribute (priority.factor, lite.bind.topic, lite.sub.model, lite.sub.client.quota,"
        " lite.sub.wildcard); repeatable",
    )
    parser.add_argument(
        "--remove-attribute", action="append", metavar="KEY", help="remove a group attribute; repeatable"
    )


def _key_value(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


_positive = _at_least(1)
_non_negative = _at_least(0)
