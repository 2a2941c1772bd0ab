"""``pyrmq topic ...``: topics, a client of the broker's ``pyrmq.admin.v1.Admin`` service.

    pyrmq topic create NAME --type NORMAL|FIFO|DELAY|TRANSACTION|PRIORITY|LITE|MIXED [--queues N | --max-priority N]
          [--lite-expiration MINUTES] [--groups G1,G2]
    pyrmq topic update NAME [--type T] [--queues N] [--groups G1,G2]
    pyrmq topic list [--all]
    pyrmq topic delete NAME

A topic lives on one or more broker groups (issue 17), each with ``--queues`` read and write
queues numbered from 0, as ``mqadmin updateTopic -c Cluster -w N -r N``. ``create`` and
``update`` are the same create-or-update call: ``--groups`` names the groups to create or
update the topic on (the topic's other groups keep their queues; default: every broker group of
the cluster), so ``update T --groups g3`` adds a group and ``update T --queues 16`` adds queues
everywhere. Nothing is moved or renumbered. ``delete`` removes the topic from every group.
Options, output and exit codes as the other admin commands (services/admin/cli.py).
"""

from __future__ import annotations

import argparse
import functools

from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from rich.console import Console

from services.admin.cli import (
    MESSAGE_TYPES,
    Document,
    Render,
    _non_negative,
    _perm_text,
    _positive,
    _print_table,
    _table,
    add_leaf,
    common_arguments,
)
from services.domain.lite import LITE_EXPIRATION_ATTRIBUTE, lite_expiration_minutes, validate_topic_attribute


def _queue_nums(ns: argparse.Namespace) -> int:
    """--queues, or --max-priority N: N + 1 queues, one per priority level (0: unchanged / the default)."""
    return ns.queues or 0 if ns.max_priority is None else ns.max_priority + 1


def _lite_expiration(text: str) -> int:
    reason = validate_topic_attribute(LITE_EXPIRATION_ATTRIBUTE, text)
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return int(text)


def _check_priority_options(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    if ns.lite_expiration is not None and ns.type not in (None, "LITE"):
        parser.error(f"--lite-expiration is for --type LITE topics, not {ns.type}")
    if ns.type == "PRIORITY" and ns.max_priority is None and ns.queues is not None and ns.queues < 2:
        parser.error(
            f"a PRIORITY topic has a queue per priority level: --queues {ns.queues} gives it one level, where every "
            "message is delivered in arrival order whatever its priority; give it 2 queues or more (--queues N, "
            "or --max-priority N for levels 0..N)"
        )
    if ns.max_priority is None:
        return
    if ns.max_priority < 1:
        parser.error(
            "--max-priority 0 gives a PRIORITY topic one level, where every message is delivered in arrival order "
            "whatever its priority; give it 1 or more (levels 0..N)"
        )
    if ns.type not in (None, "PRIORITY"):
        parser.error(f"--max-priority is for --type PRIORITY topics, not {ns.type}")
    if ns.queues is not None and ns.queues != ns.max_priority + 1:
        parser.error(
            f"a PRIORITY topic has a queue per priority level: --max-priority {ns.max_priority} "
            f"means {ns.max_priority + 1} queues, not --queues {ns.queues}"
        )


def topic_create(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    """``topic create`` and ``topic update`` (the same create-or-update call; update's type is optional)."""
    response = stub.CreateTopic(
        pb.CreateTopicRequest(
            name=ns.name,
            message_type=pb.MessageType.Value(ns.type) if ns.type else pb.MESSAGE_TYPE_UNSPECIFIED,
            queue_nums=_queue_nums(ns),
            broker_groups=ns.groups or [],
            attributes=({LITE_EXPIRATION_ATTRIBUTE: str(ns.lite_expiration)} if ns.lite_expiration is not None else {}),
        ),
        timeout=ns.timeout,
    )
    topic = _topic_doc(response.topic)

    def render(console: Console) -> None:
        groups = topic["broker_groups"]
        levels = f" (priorities 0-{topic['max_priority']})" if "max_priority" in topic else ""
        if "lite_expiration_minutes" in topic:
            minutes = topic["lite_expiration_minutes"]
            levels = (
                " (idle lite topics never expire)" if minutes < 0 else f" (idle lite topics expire after {minutes} min)"
            )
        console.print(
            f"{'Created' if response.created else 'Updated'} topic {topic['name']}: "
            f"{topic['message_type']}, {topic['write_queue_nums']} queues{levels}"
            + (f" on each of broker groups {', '.join(groups)}." if len(groups) > 1 else ".")
        )

    return {"created": response.created, "topic": topic}, render


def topic_list(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    topics = [
        _topic_doc(t) for t in stub.ListTopics(pb.ListTopicsRequest(include_system=ns.all), timeout=ns.timeout).topics
    ]

    def render(console: Console) -> None:
        table = _table(
            "TOPIC", "TYPE", "READ QUEUES", "WRITE QUEUES", "PERM", "BROKER GROUPS", *(["SYSTEM"] if ns.all else [])
        )
        for t in topics:
            table.add_row(
                t["name"],
                t["message_type"],
                str(t["read_queue_nums"]),
                str(t["write_queue_nums"]),
                _perm_text(t["perm"]),
                ", ".join(t["broker_groups"]),
                *(["yes" if t["system"] else ""] if ns.all else []),
            )
        _print_table(console, table, topics, "No topics.")

    return {"topics": topics}, render


def topic_delete(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    stub.DeleteTopic(pb.DeleteTopicRequest(name=ns.name), timeout=ns.timeout)
    return {"deleted": ns.name}, lambda console: console.print(f"Deleted topic {ns.name}.")


def _topic_doc(topic: pb.Topic) -> Document:
    return (
        {
            "name": topic.name,
            "message_type": pb.MessageType.Name(topic.message_type),
            "read_queue_nums": topic.read_queue_nums,
            "write_queue_nums": topic.write_queue_nums,
            "perm": topic.perm,
            "system": topic.system,
            "broker_groups": list(topic.broker_groups),
            "attributes": dict(sorted(topic.attributes.items())),
        }
        | ({"max_priority": topic.write_queue_nums - 1} if topic.message_type == pb.PRIORITY else {})
        | (
            {"lite_expiration_minutes": lite_expiration_minutes(dict(topic.attributes))}
            if topic.message_type == pb.LITE
            else {}
        )
    )


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one broker group")
    return names


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = common_arguments()

    leaf = functools.partial(add_leaf, common)

    topic = commands.add_parser("topic", help="create, update, list and delete topics").add_subparsers(
        dest="topic_command", required=True, metavar="{create,update,list,delete}"
    )
    create = leaf(topic, "create", topic_create, "create a topic, or change its type and queue count")
    update = leaf(topic, "update", topic_create, "add queues or broker groups to a topic, or change its type")
    for parser, required in ((create, True), (update, False)):
        parser.add_argument("name", metavar="NAME")
        parser.add_argument(
            "--type",
            required=required,
            type=str.upper,
            choices=MESSAGE_TYPES,
            help="the message type the topic accepts (MIXED: any)" + ("" if required else "; default: unchanged"),
        )
        parser.add_argument(
            "--queues",
            type=_positive,
            metavar="N",
            help="read and write queues in each broker group (default: 8 for a new topic, 10 for a new PRIORITY "
            "topic, unchanged for an existing one); a PRIORITY topic has a queue per priority level (0..N-1), so "
            "it needs 2 or more",
        )
        parser.add_argument(
            "--max-priority",
            type=_non_negative,
            metavar="N",
            help="PRIORITY topics: the highest priority, one queue per level 0..N (default 9); a message of a "
            "higher priority is stored at level N",
        )
        parser.add_argument(
            "--lite-expiration",
            type=_lite_expiration,
            metavar="MINUTES",
            help="LITE topics: a lite topic with no new message for this long is removed with its consumer "
            "offsets (lite.topic.expiration: -1 never, the default; at least 15 counts; at most 30 days)",
        )
        parser.add_argument(
            "--groups",
            type=_names,
            metavar="G1,G2",
            help="the broker groups to place the topic on, each with --queues queues; the topic's other groups "
            "keep theirs (default: every broker group of the cluster)",
        )
        parser.set_defaults(check=functools.partial(_check_priority_options, parser))
    listing = leaf(topic, "list", topic_list, "list topics")
    listing.add_argument("--all", action="store_true", help="include system topics")
    delete = leaf(topic, "delete", topic_delete, "delete a topic (its queues and consumer offsets)")
    delete.add_argument("name", metavar="NAME")
