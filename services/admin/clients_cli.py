"""``pyrmq client list|stack`` and ``pyrmq message verify``: the clients connected to a broker,
through its admin service (ListClients, PrintClientStack, VerifyMessage).

    pyrmq client list [--group G]                  who is connected (mqadmin consumerConnection /
                                                   producerConnection)
    pyrmq client stack CLIENT_ID                   the client's thread stacks
    pyrmq message verify --group G --id ID [--topic T] [--client CLIENT_ID]
                                                   a consumer of G consumes the stored message

Each broker knows only the clients connected to it: with several brokers, ask each one
(``--endpoint``). ``list`` shows v2 clients (PROTOCOL grpc, on the client port) and remoting
clients (PROTOCOL remoting: 4.x/5.x remoting clients heartbeating on the remoting port, one row
per consumer group and producer group, version as RocketMQ names it, V4_9_4); ``stack`` and
``verify`` reach v2 clients only. ``stack`` and ``verify`` send a command down the client's Telemetry stream and
wait ``--timeout`` seconds for its answer. Java, Go, C# and C++ clients print their stacks and
their push consumers verify; Node.js answers a placeholder stack and NOT_IMPLEMENTED to verify;
the Python client (5.1.2) answers neither, so both time out.

Exit codes as the other admin commands (3: no such client, group consumer or message on this
broker; 4: the client did not answer in time), and 1 when the client answered with a status other
than OK (printed).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from rich.console import Console

from services.admin.cli import EXIT_ERROR, Command, Document, Render, _print_table, _run, _table, _time_text
from services.admin.cli import common_arguments as _common_arguments

CALL_MARGIN_S = 5.0  # the RPC's deadline beyond the broker's wait for the client


def client_list(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    response = stub.ListClients(pb.ListClientsRequest(group=ns.group or ""), timeout=ns.timeout)
    clients = [
        {
            "client_id": c.client_id,
            "client_type": c.client_type,
            "group": c.group,
            "topics": list(c.topics),
            "expressions": list(c.expressions),
            "language": c.language,
            "version": c.version,
            "address": c.address,
            "connected_timestamp_ms": c.connected_timestamp_ms,
            "last_heartbeat_timestamp_ms": c.last_heartbeat_timestamp_ms,
            "protocol": c.protocol or "grpc",  # an older broker: v2 clients only
            "message_model": c.message_model,
        }
        for c in response.clients
    ]

    def render(console: Console) -> None:
        table = _table(
            "CLIENT ID", "TYPE", "PROTOCOL", "GROUP", "TOPICS", "LANGUAGE", "VERSION", "ADDRESS", "LAST HEARTBEAT"
        )
        for c in clients:
            broadcast = " (broadcasting)" if c["message_model"] == "BROADCASTING" else ""
            table.add_row(
                c["client_id"],
                c["client_type"] + broadcast,
                c["protocol"],
                c["group"] or "-",
                _topics_text(c),
                c["language"] or "-",
                c["version"] or "-",
                c["address"] or "-",
                _time_text(c["last_heartbeat_timestamp_ms"]),
            )
        where = f"of group {ns.group} " if ns.group else ""
        _print_table(console, table, clients, f"No clients {where}connected to {ns.endpoint} (it knows only its own).")

    return {"clients": clients}, render


def client_stack(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    response = stub.PrintClientStack(
        pb.PrintClientStackRequest(client_id=ns.client_id, timeout_ms=round(ns.timeout * 1000)),
        timeout=ns.timeout + CALL_MARGIN_S,
    )
    document = {**_answer_doc(response.answer), "thread_stack_trace": response.thread_stack_trace}
    ns.answer_code = response.answer.code

    def render(console: Console) -> None:
        if response.answer.code != "OK":
            console.print(_answer_line(document))
        console.print(response.thread_stack_trace)

    return document, render


def message_verify(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    response = stub.VerifyMessage(
        pb.VerifyMessageRequest(
            group=ns.group,
            message_id=ns.id,
            topic=ns.topic or "",
            client_id=ns.client or "",
            timeout_ms=round(ns.timeout * 1000),
        ),
        timeout=ns.timeout + CALL_MARGIN_S,
    )
    document = {
        **_answer_doc(response.answer),
        "topic": response.topic,
        "message_id": response.message_id,
        "offset_msg_id": response.offset_msg_id,
    }
    ns.answer_code = response.answer.code

    def render(console: Console) -> None:
        console.print(
            f"Message {response.message_id or response.offset_msg_id} of topic {response.topic}: "
            + _answer_line(document)
        )

    return document, render


def _answer_doc(answer: pb.ClientAnswer) -> Document:
    return {"client_id": answer.client_id, "code": answer.code, "message": answer.message}


def _answer_line(doc: Document) -> str:
    message = f" ({doc['message']})" if doc["message"] and doc["message"] != doc["code"] else ""
    return f"client {doc['client_id']} answered {doc['code']}{message}"


def _topics_text(client: Document) -> str:
    if not client["expressions"]:
        return ",".join(client["topics"]) or "-"
    return ",".join(f"{t}({e})" for t, e in zip(client["topics"], client["expressions"])) or "-"


def _run_answered(command: Command) -> Callable[[argparse.Namespace], int]:
    """``_run``, then EXIT_ERROR if the client answered with a status other than OK."""
    run = _run(command)

    def run_answered(ns: argparse.Namespace) -> int:
        code = run(ns)
        return code or (EXIT_ERROR if getattr(ns, "answer_code", "OK") != "OK" else 0)

    return run_answered


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``pyrmq client list|stack``, and ``verify`` under ``message`` (added by cli.add_commands
    before: services/admin/cli.py is at its size limit)."""
    message = next(a for a in commands.choices["message"]._actions if isinstance(a, argparse._SubParsersAction))
    message.metavar = "{query,verify}"
    common = _common_arguments()
    waits = _common_arguments()
    for action in waits._actions:
        if action.dest == "timeout":
            action.help = "wait this long for the client's answer (default %(default)s)"

    def leaf(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        run: Callable[[argparse.Namespace], int],
        help_text: str,
        parents: list[argparse.ArgumentParser],
    ) -> argparse.ArgumentParser:
        parser = parent.add_parser(name, parents=parents, help=help_text, description=help_text)
        parser.set_defaults(run=run)
        return parser

    client = commands.add_parser(
        "client",
        help="clients connected to the broker (each broker knows only its own)",
        description=__doc__.split("\n\n")[0],
    ).add_subparsers(dest="client_command", required=True, metavar="{list,stack}")
    listing = leaf(
        client,
        "list",
        _run(client_list),
        "connected producers and consumers: id, type, group, language, version, address, last heartbeat "
        "(only this broker's clients)",
        [common],
    )
    listing.add_argument("--group", metavar="G", help="only this consumer group's consumers")
    stack = leaf(
        client,
        "stack",
        _run_answered(client_stack),
        "print a client's thread stacks (PrintThreadStackTraceCommand; the Python client does not answer)",
        [waits],
    )
    stack.add_argument("client_id", metavar="CLIENT_ID", help="as `pyrmq client list` shows it")
    verify = leaf(
        message,
        "verify",
        _run_answered(message_verify),
        "have a consumer of a group consume a stored message (VerifyMessageCommand) and print its answer",
        [waits],
    )
    verify.add_argument("--group", required=True, metavar="G", help="the consumer group (push consumers first)")
    verify.add_argument("--id", required=True, help="a message id (the client's) or an offset message id")
    verify.add_argument("--topic", help="narrows the search for the message to this topic")
    verify.add_argument("--client", metavar="CLIENT_ID", help="this consumer of the group (default: any)")
