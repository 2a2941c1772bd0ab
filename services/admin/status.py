"""``pyrmq status``: every service's health, the topics' queue depths and the consumer groups'
lag on one screen. A client of the broker's ``Admin.GetClusterStatus``
(protos/pyrmq/admin/v1/admin.proto), of every service's ``grpc.health.v1.Health`` and of their
Prometheus endpoints.

    pyrmq status [--all] [--store HOST:PORT] [--scheduler HOST:PORT] [--txcheck HOST:PORT]
                 [--metrics-port PORT] [--data-dir DIR] [--watch SECONDS]

Where the services are: the broker at ``--endpoint`` (default 127.0.0.1:8081); the store where
the broker says it reaches it (GetClusterStatus), else the broker's host on port 10911; the
scheduler and the transaction checker beside the store, as ``pyrmq up`` and the compose file
place them (services/launcher/topology.py: store port + 4 and + 3). Each flag overrides its default.
Metrics: ``--metrics-port`` is the store's Prometheus port (default 9101, -1: do not probe); the
others' are beside it as topology.py places them (broker + 1, scheduler + 2, txcheck + 3), on
each service's gRPC host. A cluster started with ``pyrmq up --store-port 0`` or
``--metrics-port 0`` (any free ports) needs the flags: ``pyrmq up`` prints the ports.

Output: five tables (services; the store's replicas: role, epoch, offsets, in sync, lag;
topics: queues, messages stored = the sum over queues of max offset - min offset; consumer
groups: lag and messages in flight per topic; clients connected to the broker, counted by
protocol, type and group: v2 clients on the client port (grpc) and 4.x/5.x remoting clients on
the remoting port (remoting), with their languages and versions), or with ``--json`` one JSON
document ``{"services": [...], "store_address": ..., "groups": [...], "topics": [...],
"consumer_groups": [...], "clients": [...], "supervisor": {...}}`` (topics and consumer_groups are null, and
``error`` says why, if the broker could not answer; groups is null when the store could not
answer GetReplicaStatus; clients is null when the broker did not answer ListClients, and like
``pyrmq client list`` covers only the broker at ``--endpoint``).
``groups`` are the broker groups (RocketMQ's brokerName: a store replica set), each with its
``replicas[]`` (services/admin/replicas.py), the broker's own first, then every other group of
the cluster (issue 17; ``{"name", "error"}`` for one that did not answer, and its store is a
``store (<group>)`` row of the services); topics and consumer groups cover every group, each
queue naming its ``broker_name``; ``consumer_groups`` the consumer groups' lag rows
(``groups`` until issue 16). ``--all`` adds system topics and groups (and the clients of system
groups: CLIENT_INNER_PRODUCER, which every Java remoting client joins). ``--watch SECONDS``
redraws the tables every SECONDS until Ctrl-C (not with ``--json``).

A cluster run by ``pyrmq up``: its supervisor's state (services/launcher/supervisor_report.py:
each child's pid, state running / restarting / given-up, restarts, last exit code and restart
time), read from ``--data-dir`` (default ./data, up's) as long as that ``up`` runs, is a last
table, and ``supervisor`` in the JSON document (null without one). It does not change the exit code:
a child being restarted is DOWN in the services table already.

Exit codes, as the other admin commands (services/admin/cli.py): 0 every service SERVING and
the broker answered; 4 a service is not SERVING (DOWN: it did not answer; or it answered
NOT_SERVING), or the broker or its store could not be reached (the rest of the report still
prints); 1, 2, 3 another error of GetClusterStatus. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from services.admin.cli import (
    _EXIT_CODES,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNREACHABLE,
    _error_line,
    channel_of,
    common_arguments,
    positive_float,
)
from services.admin.replicas import fetch_group, replicas_table
from services.domain.names import is_system_group
from services.launcher.topology import SERVICES, SUPERVISOR_STATE_FILE
from services.runtime.process import format_address

DEFAULT_STORE_PORT = 10911  # the store's default gRPC port ([store] port)
DEFAULT_METRICS_PORT = 9101  # the store's default Prometheus port ([store] metrics_port)
HEALTH_TIMEOUT_S_MAX = 5.0  # per service check; a dead host must not hold the report long
SERVING = "SERVING"
DOWN = "DOWN"
_NUMERIC_COLUMNS = frozenset({"LATENCY", "QUEUES", "MESSAGES", "MAX OFFSET", "LAG", "IN FLIGHT", "CLIENTS"})

Document = dict[str, Any]


@dataclass(frozen=True)
class ServiceCheck:
    """One service as ``status`` found it."""

    name: str
    address: str
    status: str  # SERVING, NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN or DOWN
    latency_ms: float | None  # of the health check; None when DOWN
    error: str  # why DOWN ("" otherwise)
    metrics_url: str  # "" when not probed (--metrics-port -1)
    metrics_reachable: bool | None


@dataclass(frozen=True)
class Report:
    services: list[ServiceCheck]
    store_address: str
    topics: list[Document] | None  # None: GetClusterStatus failed (``error``)
    groups: list[Document] | None
    error: str
    exit_code: int
    broker_groups: list[Document] | None = None  # None: the store did not answer GetReplicaStatus
    clients: list[Document] | None = None  # None: the broker did not answer ListClients
    supervisor: Document | None = None  # None: no running ``pyrmq up`` keeps state in --data-dir

    def document(self) -> Document:
        doc: Document = {
            "services": [asdict(s) for s in self.services],
            "store_address": self.store_address,
            "groups": self.broker_groups,
            "topics": self.topics,
            "consumer_groups": self.groups,
            "clients": self.clients,
            "supervisor": self.supervisor,
        }
        if self.error:
            doc["error"] = self.error
        return doc


# -- collecting ------------------------------------------------------------------------------------


def collect(ns: argparse.Namespace) -> Report:
    """Ask the broker for the cluster status, then check every service's health and metrics."""
    topics = groups = clients = None
    reported_store, error, exit_code = "", "", EXIT_OK
    others: list[pb.BrokerGroupStatus] = []  # the broker groups besides the broker's own
    try:
        with channel_of(ns) as channel:
            stub = pb_grpc.AdminStub(channel)
            response = stub.GetClusterStatus(pb.GetClusterStatusRequest(include_system=ns.all), timeout=ns.timeout)
            clients = connected_clients(stub, ns.timeout, ns.all)
    except grpc.RpcError as exc:
        error = _cluster_error(exc, ns.endpoint)
        exit_code = _EXIT_CODES.get(exc.code(), EXIT_ERROR)
    else:
        reported_store = response.store_address
        topics = [_topic_doc(t) for t in response.topics]
        groups = [_group_doc(g) for g in response.groups]
        others = [g for g in response.broker_groups if g.store_address != reported_store or g.error]
    addresses = service_addresses(ns, reported_store)
    # Each other broker group's store (its helpers' addresses are its deployment's to know).
    addresses |= {f"store ({g.name})": g.store_address for g in others if g.store_address}
    metrics = metrics_urls(ns, addresses)
    timeout_s = min(ns.timeout, HEALTH_TIMEOUT_S_MAX)
    with ThreadPoolExecutor(max_workers=2 * len(addresses), thread_name_prefix="status") as pool:
        health = {name: pool.submit(check_health, address, timeout_s) for name, address in addresses.items()}
        scraped = {name: pool.submit(probe_metrics, url, timeout_s) for name, url in metrics.items() if url}
        replicas = [pool.submit(_broker_group, addresses["store"], timeout_s)]
        replicas += [pool.submit(_broker_group, g.store_address, timeout_s, g.name, g.error) for g in others]
        services = [
            ServiceCheck(
                name,
                addresses[name],
                *health[name].result(),
                metrics.get(name, ""),
                scraped[name].result() if name in scraped else None,
            )
            for name in addresses
        ]
    if exit_code == EXIT_OK and any(s.status != SERVING for s in services):
        exit_code = EXIT_UNREACHABLE
    home, *rest = (future.result() for future in replicas)
    broker_groups = None if home is None else [home, *(group for group in rest if group is not None)]
    supervisor = read_supervisor(Path(ns.data_dir) / SUPERVISOR_STATE_FILE)
    return Report(services, addresses["store"], topics, groups, error, exit_code, broker_groups, clients, supervisor)


def read_supervisor(path: Path) -> Document | None:
    """``pyrmq up``'s supervisor state (services/launcher/supervisor_report.py) if the file is
    there and the ``up`` that wrote it still runs (a killed one leaves a stale file)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        os.kill(int(doc["up_pid"]), 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's up: it runs
        pass
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return doc if isinstance(doc.get("children"), list) else None


def connected_clients(stub: pb_grpc.AdminStub, timeout_s: float, include_system: bool) -> list[Document] | None:
    """The broker's clients (ListClients) counted by protocol, type and group, each row with its
    clients' languages and versions (``JAVA V4_9_4``); None if the broker did not answer."""
    try:
        response = stub.ListClients(pb.ListClientsRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return None
    rows: dict[tuple[str, str, str], Document] = {}
    for client in response.clients:
        if not include_system and is_system_group(client.group):
            continue
        protocol = client.protocol or "grpc"  # an older broker: v2 clients only
        row = rows.setdefault(
            (protocol, client.client_type, client.group),
            {"protocol": protocol, "client_type": client.client_type, "group": client.group, "count": 0},
        )
        row["count"] += 1
        kind = " ".join(part for part in (client.language, client.version) if part) or "unknown"
        row.setdefault("versions", set()).add(kind)
    return [{**row, "versions": sorted(row["versions"])} for _, row in sorted(rows.items())]


def _broker_group(address: str, timeout_s: float, name: str = "", error: str = "") -> Document | None:
    """The replicas of the broker group whose store is at ``address``; for another group than
    the broker's own, ``{"name", "error"}`` when the broker or the store could not reach it."""
    if error or not address:
        return {"name": name, "error": error or "no store address"}
    try:
        return fetch_group(address, timeout_s)
    except grpc.RpcError as exc:  # the broker's own: DOWN (the services table says why) or an older store
        return {"name": name, "error": f"{exc.code().name}: {exc.details()}"} if name else None


def service_addresses(ns: argparse.Namespace, reported_store: str) -> dict[str, str]:
    """Service name -> gRPC address, in topology order (store, broker, scheduler, txcheck)."""
    broker_host, _ = split_address(ns.endpoint)
    store = ns.store or reported_store or format_address(broker_host, DEFAULT_STORE_PORT)
    store_host, store_port = split_address(store)
    placed = _placement(ns, store_port)
    given = {"store": store, "broker": ns.endpoint, "scheduler": ns.scheduler, "txcheck": ns.txcheck}
    return {spec.name: given[spec.name] or format_address(store_host, spec.grpc_port(placed)) for spec in SERVICES}


def metrics_urls(ns: argparse.Namespace, addresses: dict[str, str]) -> dict[str, str]:
    """Service name -> its Prometheus URL as topology.py places it beside --metrics-port; "" if off.
    Another group's store (``store (<group>)``) is placed as ``pyrmq up --groups`` and the
    compose file place it: its metrics port is as far from the home store's as its gRPC port."""
    home_port = split_address(addresses["store"])[1]
    placed = _placement(ns, home_port)
    urls = {}
    for spec in SERVICES:
        port = spec.metrics_port(placed)
        host = split_address(addresses[spec.name])[0]
        urls[spec.name] = f"http://{format_address(host, port)}/metrics" if port > 0 else ""
    store_metrics = next(spec for spec in SERVICES if spec.name == "store").metrics_port(placed)
    for name, address in addresses.items():
        if name.startswith("store ("):
            host, port = split_address(address)
            moved = store_metrics + port - home_port
            urls[name] = f"http://{format_address(host, moved)}/metrics" if store_metrics > 0 and moved > 0 else ""
    return urls


def _placement(ns: argparse.Namespace, store_port: int) -> argparse.Namespace:
    """The namespace topology.SERVICES computes ports from (as ``pyrmq up`` fills it)."""
    _, broker_port = split_address(ns.endpoint)
    return argparse.Namespace(
        port=broker_port, store_port=store_port, metrics_port=ns.metrics_port, broker_metrics_port=None
    )


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); port 0 if missing or not a number."""
    host, sep, port = address.rpartition(":")
    if not sep or "]" in port:
        return address.strip("[]"), 0
    return host.strip("[]"), int(port) if port.isdigit() else 0


def check_health(address: str, timeout_s: float) -> tuple[str, float | None, str]:
    """(status, latency in ms, why DOWN) of the service at ``address`` (``Health.Check("")``)."""
    started_s = time.monotonic()
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
    except grpc.RpcError as exc:
        return DOWN, None, f"{exc.code().name}: {' '.join((exc.details() or '').split())}"
    latency_ms = round((time.monotonic() - started_s) * 1000, 1)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status), latency_ms, ""


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # metrics are local: never a proxy


def probe_metrics(url: str, timeout_s: float) -> bool:
    """Whether ``url`` answers 200 (the body is not read)."""
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as response:
            return response.status == 200
    except (OSError, ValueError, http.client.HTTPException):
        return False


def _cluster_error(exc: grpc.RpcError, endpoint: str) -> str:
    if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
        return f"{endpoint} does not serve Admin.GetClusterStatus (an older pyrmq broker, or not a pyrmq broker?)"
    return _error_line(exc, endpoint)


def _topic_doc(status: pb.TopicStatus) -> Document:
    return {
        "name": status.topic.name,
        "message_type": pb.MessageType.Name(status.topic.message_type),
        "system": status.topic.system,
        "broker_groups": list(status.topic.broker_groups),
        "queue_nums": len(status.queues),
        "message_count": status.message_count,
        "lite_topic_count": status.lite_topic_count,
        "max_offset": sum(q.max_offset for q in status.queues),
        "queues": [
            {
                "broker_name": q.broker_name,
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
            }
            for q in status.queues
        ],
    }


def _group_doc(status: pb.GroupTopicStatus) -> Document:
    return {
        "group": status.group,
        "topic": status.topic,
        "lag": status.lag,
        "inflight_messages": status.inflight_messages,
        "lite_topic_count": status.lite_topic_count,
        "queues": [
            {
                "broker_name": q.broker_name,
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "broker_offset": q.broker_offset,
                "consumer_offset": q.consumer_offset,
                "lag": q.lag,
            }
            for q in status.queues
        ],
    }


# -- rendering -------------------------------------------------------------------------------------


def render(report: Report, with_error: bool = False) -> RenderableType:
    """The three tables; ``with_error``: the broker's error as a line too (--watch has no stderr)."""
    parts: list[RenderableType] = [Text("Services", style="bold"), _services_table(report.services)]
    for broker_group in report.broker_groups or []:
        if "error" in broker_group:
            parts += [
                Text(""),
                Text(f"Broker group {broker_group['name']}: no answer ({broker_group['error']})", style="bold red"),
            ]
            continue
        master = (
            f"master {broker_group['master_id']} at epoch {broker_group['master_epoch']}"
            if broker_group["master_id"] >= 0
            else "no master"
        )
        parts += [
            Text(""),
            Text(
                f"Replicas of {broker_group['name']} ({master}, in sync {broker_group['sync_state_set']})", style="bold"
            ),
            replicas_table(broker_group["replicas"]),
        ]
    if report.topics is not None:
        parts += [
            Text(""),
            Text("Topics", style="bold"),
            _topics_table(report.topics) if report.topics else Text("No topics."),
        ]
    if report.groups is not None:
        parts += [
            Text(""),
            Text("Consumer groups", style="bold"),
            _groups_table(report.groups) if report.groups else Text("No consumer groups."),
        ]
    if report.clients is not None:
        parts += [
            Text(""),
            Text("Clients of this broker", style="bold"),
            _clients_table(report.clients) if report.clients else Text("No clients connected."),
        ]
    if report.supervisor is not None:
        parts += [
            Text(""),
            Text(f"Supervisor (pyrmq up, pid {report.supervisor['up_pid']})", style="bold"),
            _supervisor_table(report.supervisor["children"]),
        ]
    if with_error and report.error:
        parts += [Text(""), Text(f"error: {report.error}", style="red")]
    return Group(*parts)


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMERIC_COLUMNS else "left")
    return table


def _services_table(services: list[ServiceCheck]) -> Table:
    table = _table("SERVICE", "ADDRESS", "HEALTH", "LATENCY", "METRICS", "METRICS URL")
    for s in services:
        health = Text(s.status, style="green" if s.status == SERVING else "bold red")
        if s.error:  # the status code only; --json has the details
            health.append(f" ({s.error.partition(':')[0]})", style="red")
        metrics = "-" if s.metrics_reachable is None else "yes" if s.metrics_reachable else "no"
        latency = "-" if s.latency_ms is None else f"{s.latency_ms:.1f} ms"
        table.add_row(s.name, s.address, health, latency, metrics, s.metrics_url or "-")
    return table


def _topics_table(topics: list[Document]) -> Table:
    system = any(t["system"] for t in topics)
    spread = any(len(t["broker_groups"]) > 1 for t in topics)  # several broker groups: say which
    lite = any(t["message_type"] == "LITE" for t in topics)
    table = _table(
        "TOPIC",
        "TYPE",
        *(["BROKER GROUPS"] if spread else []),
        "QUEUES",
        "MESSAGES",
        "MAX OFFSET",
        *(["LITE TOPICS"] if lite else []),
        *(["SYSTEM"] if system else []),
    )
    for t in topics:
        table.add_row(
            t["name"],
            t["message_type"],
            *([",".join(t["broker_groups"])] if spread else []),
            str(t["queue_nums"]),
            str(t["message_count"]),
            str(t["max_offset"]),
            *([str(t["lite_topic_count"]) if t["message_type"] == "LITE" else ""] if lite else []),
            *(["yes" if t["system"] else ""] if system else []),
        )
    return table


def _groups_table(groups: list[Document]) -> Table:
    lite = any(g["lite_topic_count"] for g in groups)
    table = _table("GROUP", "TOPIC", "LAG", "IN FLIGHT", *(["LITE TOPICS"] if lite else []))
    for g in groups:
        lag = Text(str(g["lag"]), style="yellow" if g["lag"] else "")
        count = [str(g["lite_topic_count"]) if g["lite_topic_count"] else ""] if lite else []
        table.add_row(g["group"], g["topic"] or "-", lag, str(g["inflight_messages"]), *count)
    return table


def _clients_table(clients: list[Document]) -> Table:
    table = _table("PROTOCOL", "TYPE", "GROUP", "CLIENTS", "LANGUAGES AND VERSIONS")
    for c in clients:
        table.add_row(c["protocol"], c["client_type"], c["group"] or "-", str(c["count"]), ", ".join(c["versions"]))
    return table


def _supervisor_table(children: list[Document]) -> Table:
    table = _table("CHILD", "PID", "STATE", "RESTARTS", "LAST EXIT", "LAST RESTART")
    styles = {"running": "green", "restarting": "yellow"}
    for c in children:
        code = c.get("last_exit_code")
        restarted = c.get("last_restart_ms")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(restarted / 1000)) if restarted else "-"
        table.add_row(
            str(c.get("child", "?")),
            str(c.get("pid", "?")),
            Text(str(c.get("state", "?")), style=styles.get(str(c.get("state")), "bold red")),
            str(c.get("restarts", 0)),
            "-" if code is None else str(code),
            when,
        )
    return table


# -- running ---------------------------------------------------------------------------------------


def run(ns: argparse.Namespace) -> int:
    console = Console(markup=False, highlight=False, emoji=False, width=None if sys.stdout.isatty() else 1_000)
    if ns.watch:
        return _watch(ns, console)
    report = collect(ns)
    if ns.json:
        print(json.dumps(report.document(), indent=2))
    else:
        console.print(render(report))
    if report.error:
        print(f"pyrmq: error: {report.error}", file=sys.stderr)
    return report.exit_code


def _watch(ns: argparse.Namespace, console: Console) -> int:
    """Redraw until Ctrl-C; exit with the last report's code."""
    exit_code = EXIT_OK
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                report = collect(ns)
                exit_code = report.exit_code
                live.update(
                    Group(
                        render(report, with_error=True), Text(f"\nevery {ns.watch:g} s, Ctrl-C to stop", style="dim")
                    ),
                    refresh=True,
                )
                _wait(ns.watch)
    except KeyboardInterrupt:
        return exit_code


def _wait(seconds: float) -> None:
    time.sleep(seconds)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status`` to ``pyrmq``'s subcommands."""
    help_text = "every service's health, the topics' queue depths and the consumer groups' lag"
    parser = commands.add_parser(
        "status",
        help=help_text,
        description=help_text,
        parents=[common_arguments("print one JSON document instead of tables")],
        epilog=f"Health checks wait at most {HEALTH_TIMEOUT_S_MAX:g} s.",
    )
    parser.add_argument("--all", action="store_true", help="include system topics and groups")
    parser.add_argument(
        "--store",
        metavar="HOST:PORT",
        help="the store's gRPC address (default: the one the broker uses, else the broker's host, "
        f"port {DEFAULT_STORE_PORT})",
    )
    parser.add_argument(
        "--scheduler",
        metavar="HOST:PORT",
        help="the scheduler's gRPC (health) address (default: the store's host, its port + 4)",
    )
    parser.add_argument(
        "--txcheck",
        metavar="HOST:PORT",
        help="the transaction checker's gRPC (health) address (default: the store's host, its port + 3)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        metavar="PORT",
        help="the store's Prometheus port; the broker's is + 1, the scheduler's + 2, txcheck's + 3 "
        "(default %(default)s; -1: do not probe metrics)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data"),
        metavar="DIR",
        help=f"the data directory of pyrmq up, whose supervisor state (DIR/{SUPERVISOR_STATE_FILE}: each "
        "service's pid, state and restarts) is shown when that up runs (default: ./data, up's)",
    )
    parser.add_argument("--watch", type=positive_float, metavar="SECONDS", help="redraw every SECONDS until Ctrl-C")

    def checked_run(ns: argparse.Namespace) -> int:
        if ns.watch and ns.json:
            parser.error("--watch draws tables; it cannot be used with --json")
        return run(ns)

    parser.set_defaults(run=checked_run)
