"""``pyrmq up``: every pyrmq service as a child process of this one, until SIGINT/SIGTERM.

Services are rows of ``services/launcher/topology.SERVICES`` (store, broker, scheduler, txcheck), started
in table order, each one only after the rows before it printed their ready lines (rows that read
nothing of each other start at once: services/launcher/children.py ``start_waves``); a row's
arguments may use the key=value pairs of an earlier service's ready line. They stop tier by tier
(``stop_all``): the scheduler and txcheck, then the brokers, the store replicas, and etcd last,
the services of one tier at once.

A service's contract with ``up``: ``python -m <module> <args>`` prints exactly one line,
``pyrmq-<name> ready key=value ...``, on stdout once it serves; logs go to stderr; SIGTERM
or SIGINT makes it stop cleanly and exit 0.

``up --create-topic NAME`` (``make run``: TopicTest, for the README's first example) creates
each named topic that does not exist yet, once every service serves and before the ready line:
the broker answers TOPIC_NOT_FOUND for unknown topics (auto-create is off, as in RocketMQ 5's
proxy). It goes to the store directly, as the operator who runs it (no broker credentials).

The brokers serve RocketMQ's remoting protocol too (``--remoting-port``, default 9876: name
server and broker at once, for 4.x/5.x remoting clients and tools); the first line then carries
the broker's ``remoting=HOST:PORT`` (from its ready line), the address remoting routes name.

``up`` forwards SIGINT/SIGTERM to the children and exits 0 once they have stopped cleanly.

``up`` supervises (services/launcher/supervision.py, issue 30). A service that cannot start at
all (it exits, or is not ready within READY_TIMEOUT_S, before the first line) stops ``up``
with the reason, exit 1. Once the cluster is up, any child that exits (store, broker,
scheduler, txcheck, the local etcd) is restarted with the same settings and ports after a
backoff (0.5 s, doubling to 30 s; back to 0.5 s once it stayed up a minute), logged
("store-b exited unexpectedly with code -9; restarting it in 0.5 s (restart 1)"); the others
keep serving meanwhile (a group whose store is down is skipped by new sends:
services/broker/README.md). A child restarted ``--restart-limit`` times (5) within a minute that
exits once more, or a restarted child not ready within READY_TIMEOUT_S, is given up on: ``up``
logs why, stops every service and exits 1. ``--restart-limit 0``: the first exit does that.
Restarts are in DATA_DIR/up-state.json, which ``pyrmq status`` shows, and in the
``pyrmq_up_child_*`` metrics on ``--up-metrics-port`` (services/launcher/supervisor_report.py).

``up --replicas N`` (``--etcd-endpoints``) runs the store as a replica set in controller mode
(services/launcher/topology.rows: a local etcd member first when no endpoints are given).

``up`` places its processes on the CPUs it may use (services/launcher/placement.py): the store(s) and the
broker on cores of their own, the others on what is left; ``--cpu-placement off`` leaves that to
the operating system, and a service's own ``cpu_affinity`` setting always wins.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TextIO

from services.broker.config import SETTINGS as BROKER_SETTINGS
from services.coordination.route_view import RouteStore
from services.domain.routes import QueueData, TopicRoute
from services.launcher.children import Child, start_waves, stop_all
from services.launcher.placement import MODES as PLACEMENT_MODES
from services.launcher.placement import affinity_environment, placement_text, plan_for_up, running_on
from services.launcher.supervision import RestartPolicy
from services.launcher.topology import (
    GROUP_PORT_STEP,
    GROUPS_MAX,
    REPLICA_PORT_STEP,
    SUPERVISOR_STATE_FILE,
    group_names,
    needs_etcd,
    remoting_group_ports,
    rows,
    service_environment,
)
from services.launcher.up_supervisor import UpSupervisor
from services.runtime import settings
from services.runtime.etcd.model import EtcdError
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.process import free_ports
from services.runtime.rpc.tls import TlsFiles
from services.runtime.settings import CONFIG_ENV
from services.store.client.client import GrpcStoreClient
from services.store.client.errors import StoreError
from services.store.client.model import TopicInfo
from services.store.config import SETTINGS as STORE_SETTINGS

log = logging.getLogger("pyrmq")

READY_TIMEOUT_S = 120.0  # recovery of a large store can take a while
# Signal handlers only record the signal (taking a lock in a handler can deadlock the thread it
# interrupted), so the main loop wakes at least this often to look.
POLL_INTERVAL_S = 0.2
# A topic made by --create-topic: any message type (normal, FIFO, delay, transactional), 8 queues.
CREATED_TOPIC_MESSAGE_TYPE = "MIXED"
CREATED_TOPIC_QUEUE_NUMS = 8
PERM_READ_WRITE = 6


def resolve_up(ns: argparse.Namespace, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Fill the flags ``up`` was not given from the config file and the environment ([store]
    data_dir, host, port, metrics_host, metrics_port; [broker] port, remoting_port,
    metrics_port, advertised_host), then the defaults. Returns the environment every child gets besides its
    row's settings (PYRMQ_CONFIG when --config is given). SettingsError for a bad file or value."""
    environ = dict(os.environ if environ is None else environ)
    if ns.config:
        environ[CONFIG_ENV] = str(Path(ns.config).resolve())
    # Under `up` the store's data_dir is not required: ./data unless the file or environment say.
    store_settings = {
        **STORE_SETTINGS,
        "data_dir": dataclasses.replace(STORE_SETTINGS["data_dir"], default=Path("data")),
    }
    store = settings.values(settings.resolve("store", store_settings, {}, environ))
    broker_set = settings.resolve("broker", BROKER_SETTINGS, {}, environ)
    broker = settings.values(broker_set)
    fill = {
        "data_dir": store["data_dir"],
        "host": store["host"],
        "store_port": store["port"],
        "metrics_host": store["metrics_host"],
        "metrics_port": store["metrics_port"],
        "port": broker["port"],
        "remoting_port": broker["remoting_port"],
        "advertised_host": broker["advertised_host"],
    }
    for key, value in fill.items():
        if getattr(ns, key) is None:
            setattr(ns, key, value)
    if ns.broker_metrics_port is None and broker_set["metrics_port"].source != "default":
        ns.broker_metrics_port = broker["metrics_port"]
    ns.store_tls = TlsFiles(broker["store_tls_ca_path"], broker["store_tls_cert_path"], broker["store_tls_key_path"])
    return {CONFIG_ENV: environ[CONFIG_ENV]} if ns.config else {}


def up(ns: argparse.Namespace) -> int:
    try:
        shared_env = resolve_up(ns)
    except settings.SettingsError as exc:
        log.error("bad configuration: %s", exc)
        return 2
    ns.data_dir = Path(ns.data_dir).resolve()
    ns.data_dir.mkdir(parents=True, exist_ok=True)
    ns.broker_data_dir = ns.data_dir / "broker"
    if ns.log_dir is not None:
        ns.log_dir = Path(ns.log_dir).resolve()
        ns.log_dir.mkdir(parents=True, exist_ok=True)
    wake = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    children: list[Child] = []
    ns.ready, ns.cpus = {}, {}
    problem = check_shape(ns)
    if problem:
        log.error("bad arguments: %s", problem)
        return 2
    place_replicas(ns)
    try:
        planned = plan_for_up(
            [(label, spec.name) for label, spec, _ in rows(ns)], {**os.environ, **shared_env}, ns.cpu_placement
        )
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2
    for wave in start_waves(rows(ns)):
        started = [
            Child(
                spec,
                {
                    **shared_env,
                    **service_environment(spec, namespace()),
                    **affinity_environment(spec.name, planned.get(label)),
                },
                wake,
                ns.log_dir / f"{label}.log" if ns.log_dir else None,
                label,
            )
            for label, spec, namespace in wave
        ]
        children += started
        polls_left = int(READY_TIMEOUT_S / POLL_INTERVAL_S)
        while (waiting := [c for c in started if not c.ready.is_set()]) and not received:
            if any(c.exited() for c in waiting):
                break
            if polls_left == 0:
                log.error("%s not ready within %.0f s", waiting[0].label, READY_TIMEOUT_S)
                stop_all(children, signal.SIGTERM)
                return 1
            polls_left -= 1
            wake.wait(POLL_INTERVAL_S)
            wake.clear()
        if received:
            return 0 if stop_all(children, received[0]) else 1
        if dead := [c for c in started if not c.ready.is_set() and c.exited()]:
            log.error("%s exited with code %s before it was ready", dead[0].label, dead[0].process.wait())
            stop_all(children, signal.SIGTERM)
            return 1
        for child in started:
            assert child.ready_line is not None
            ns.ready[child.label] = dict(item.split("=", 1) for item in child.ready_line.split() if "=" in item)
            ns.cpus[child.label] = running_on(child.process.pid)

    try:
        groups = tuple(group_names(ns.groups))
        create_missing_topics(ns.ready["store"]["grpc"], ns.store_tls, ns.create_topic, etcd_endpoints(ns), groups)
    except StoreError as exc:
        log.error("could not create the topics %s: %s", ", ".join(ns.create_topic), exc)
        stop_all(children, signal.SIGTERM)
        return 1
    try:
        supervision = UpSupervisor(ns, children, wake, READY_TIMEOUT_S)
    except OSError as exc:
        log.error("cannot serve pyrmq up's metrics on port %d: %s", ns.up_metrics_port, exc)
        stop_all(children, signal.SIGTERM)
        return 1
    ns.up_metrics_url = supervision.metrics_url
    summary = " ".join(f"{c.label} {c.ready_line}" for c in children)
    cpus = ";".join(f"{label}:{where}" for label, where in ns.cpus.items())
    print(f"pyrmq up: {summary} cpus={cpus} (RocketMQ clients: endpoints {ns.ready['broker']['endpoint']})", flush=True)
    print_cluster(ns, sys.stdout)

    return supervision.run(received, POLL_INTERVAL_S)


def parse_summary(line: str) -> dict[str, dict[str, str]]:
    """``pyrmq up``'s first line (``pyrmq up: store grpc=... broker grpc=... cpus=...``) ->
    label -> the key=value pairs of that service's ready line, for scripts."""
    body = line.removeprefix("pyrmq up: ").split(" cpus=", 1)[0]
    out: dict[str, dict[str, str]] = {}
    label = ""
    for item in body.split():
        key, sep, value = item.partition("=")
        if sep:
            out[label][key] = value
        else:
            label = item
            out[label] = {}
    return out


def place_replicas(ns: argparse.Namespace) -> None:
    """A replica set's ports: the local etcd's (2379 and 2380, or free ones with --store-port 0,
    as each replica's own store port then: a replica registers its address before it binds).
    With several groups and --remoting-port 0, the other groups' remoting ports too: free ones
    chosen here, so every broker of --brokers B binds the same (topology.remoting_group_ports)."""
    ns.etcd_port = 2379
    if ns.store_port == 0 and (needs_etcd(ns) or ns.etcd_endpoints):
        ns.replica_ports = free_ports(ns.groups * ns.replicas)  # group by group (topology.group_namespace)
        ns.etcd_port = free_ports(1, with_successor=True)[0]
    if ns.remoting_port == 0 and ns.groups > 1:
        ns.remoting_group_port_list = free_ports(ns.groups - 1)


def check_shape(ns: argparse.Namespace) -> str | None:
    """What is wrong with --groups, --replicas and --brokers together (None: nothing)."""
    if not 1 <= ns.groups <= GROUPS_MAX:
        return f"--groups must be 1 to {GROUPS_MAX}, got {ns.groups}"
    if ns.replicas < 1 or (ns.groups > 1 and ns.replicas * REPLICA_PORT_STEP > GROUP_PORT_STEP):
        return f"--replicas must be 1 to {GROUP_PORT_STEP // REPLICA_PORT_STEP} with several groups, got {ns.replicas}"
    if ns.restart_limit < 0:
        return f"--restart-limit must be 0 or more, got {ns.restart_limit}"
    if ns.brokers < 1:
        return f"--brokers must be at least 1, got {ns.brokers}"
    if not -1 <= ns.remoting_port <= 0xFFFF:
        return f"--remoting-port must be 0 to 65535 (-1: off), got {ns.remoting_port}"
    if ns.remoting_port > 0 and ns.remoting_port + GROUP_PORT_STEP * (ns.groups - 1) > 0xFFFF:
        return f"--remoting-port {ns.remoting_port} leaves no remoting port for group {ns.groups} (+ {GROUP_PORT_STEP} each)"
    return None


def etcd_endpoints(ns: argparse.Namespace) -> str:
    return ns.etcd_endpoints or ns.ready.get("etcd", {}).get("grpc", "")


def create_missing_topics(
    store_address: str, tls: TlsFiles, names: list[str], etcd: str = "", groups: tuple[str, ...] = ("broker-a",)
) -> None:
    """Create each topic the store does not have (MIXED, 8 queues); one it has is left as it is.
    With ``etcd``: on the group's master, once one is elected. With several ``groups``: in each
    group's store, then each group's queues added to the topic's route in etcd (as ``pyrmq topic
    create`` does), so the brokers spread it over every group."""
    if not names:
        return
    stored: dict[str, list[QueueData]] = {name: [] for name in names}
    for group in groups:
        store = GrpcStoreClient(store_address, tls=tls, put_stream=False, etcd_endpoints=etcd, group=group)
        try:
            if etcd and not store.wait_ready(READY_TIMEOUT_S, give_up=lambda: False):
                raise StoreError(f"the replica set {group} elected no master in time")
            for name in names:
                topic = store.get_topic(name)
                if topic is None:
                    queues = CREATED_TOPIC_QUEUE_NUMS
                    topic = TopicInfo(name, queues, queues, PERM_READ_WRITE, CREATED_TOPIC_MESSAGE_TYPE)
                    store.create_topic(topic)
                    log.info("created topic %s (%s, %d queues) in %s", name, topic.message_type, queues, group)
                stored[name].append(QueueData(group, topic.read_queue_nums, topic.write_queue_nums, topic.perm))
        finally:
            store.close()
    if len(groups) > 1:
        add_routes(etcd, stored)


def add_routes(etcd: str, stored: dict[str, list[QueueData]]) -> None:
    """Each topic's groups added to its route in etcd (compare-and-swap: other groups stay)."""
    client = EtcdClient([endpoint.strip() for endpoint in etcd.split(",") if endpoint.strip()])
    try:
        routes = RouteStore(client)
        for name, queue_datas in stored.items():

            def change(
                route: TopicRoute | None, name: str = name, queue_datas: list[QueueData] = queue_datas
            ) -> TopicRoute:
                route = route or TopicRoute(name, CREATED_TOPIC_MESSAGE_TYPE)
                for queue_data in queue_datas:
                    route = route.with_group(queue_data)
                return route

            routes.update(name, change)
    except EtcdError as exc:
        raise StoreError(f"cannot write the topic routes to etcd: {exc}") from exc
    finally:
        client.close()


def print_cluster(ns: argparse.Namespace, out: TextIO) -> None:
    """For people, after the ready line: where each service listens, its metrics, CPUs, data and logs."""
    ready = ns.ready
    table = [("service", "gRPC", "metrics", "cpus", "data", "log")]
    for label in ready:
        data = ready[label].get("data", "")
        log_file = str(ns.log_dir / f"{label}.log") if ns.log_dir else "stderr of pyrmq up"
        cpus = getattr(ns, "cpus", {}).get(label, "?")
        table.append((label, ready[label]["grpc"], ready[label]["metrics"], cpus, data, log_file))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
    etcd = etcd_endpoints(ns)
    if etcd:
        groups = group_names(ns.groups)
        lines += [""] + [
            f"  replica set:      {group}, {ns.replicas} store replica(s), etcd {etcd} "
            f"(pyrmq replica list --group {group} --etcd-endpoints {etcd})"
            for group in groups
        ]
        if ns.brokers > 1:
            lines.append(
                f"  brokers:          {ns.brokers} on the one client port and remoting port (SO_REUSEPORT), "
                "each serving every group"
            )
    config = os.environ.get(CONFIG_ENV) if not ns.config else str(Path(ns.config).resolve())
    lines += [
        "",
        f"  RocketMQ clients: endpoints {ready['broker']['endpoint']} "
        f'(e.g. ClientConfiguration("{ready["broker"]["endpoint"]}", Credentials()))',
        *_remoting_lines(ready["broker"], remoting_group_ports(ns)),
        f"  TLS:              {_tls_text(ready['broker'])}",
        f"  CPU placement:    {placement_text(getattr(ns, 'cpu_placement', 'auto'))}",
        f"  supervision:      {_supervision_text(ns)}",
        f"  data directory:   {ns.data_dir}",
        f"  configuration:    {config or 'defaults (and PYRMQ_* environment variables)'}",
        "  stop with Ctrl-C (SIGINT) or SIGTERM",
        "",
    ]
    out.write("\n".join(lines) + "\n")
    out.flush()


def _remoting_lines(broker: dict[str, str], group_ports: dict[str, int]) -> list[str]:
    """Where 4.x/5.x remoting clients and tools point (their name server address), if the
    broker serves the remoting protocol (its ready line's ``remoting``), and the other broker
    groups' own remoting ports, which routes name."""
    address = broker.get("remoting")
    if not address:
        return ["  remoting clients: off (--remoting-port -1)"]
    lines = [
        f"  remoting clients: namesrvAddr {address} (name server and broker at once; e.g. "
        f'producer.setNamesrvAddr("{address}"), mqadmin clusterList -n {address})'
    ]
    if group_ports:  # routes name them: 4.x clients name no broker group in a request
        others = ", ".join(f"{name} on port {port}" for name, port in group_ports.items())
        lines.append(f"  remoting groups:  the first group on that port, {others}")
    return lines


def _supervision_text(ns: argparse.Namespace) -> str:
    limit = getattr(ns, "restart_limit", RestartPolicy.restarts_max)
    if limit == 0:
        return "off (--restart-limit 0: a service that exits stops pyrmq up)"
    metrics = getattr(ns, "up_metrics_url", "")
    return (
        f"a service that exits is restarted, at most {limit} times a minute; "
        f"pyrmq status --data-dir {ns.data_dir} shows restarts" + (f"; metrics {metrics}" if metrics else "")
    )


def _tls_text(broker: dict[str, str]) -> str:
    mode, cert = broker.get("tls", "plaintext"), broker.get("cert", "-")
    if mode == "plaintext":
        return "off (plaintext only)"
    ports = "TLS and plaintext on the one port" if mode == "both" else "TLS only"
    trust = f"; clients that check it trust {cert}" if cert not in ("-", "memory") else ""
    return f"{ports}{trust}"


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up_parser = commands.add_parser("up", help="run every pyrmq service until SIGINT/SIGTERM")
    up_parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML settings file for every service (default: $PYRMQ_CONFIG if set)",
    )
    up_parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory shared by the services (default: [store] data_dir, else ./data)",
    )
    up_parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="write each service's log to LOG_DIR/<service>.log (default: this stderr)",
    )
    up_parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="client (broker) port, for RocketMQ v2 gRPC clients, 0 for any free one "
        "(default: [broker] port, else 8081)",
    )
    up_parser.add_argument(
        "--remoting-port",
        type=int,
        default=None,
        metavar="N",
        help="RocketMQ remoting port, for 4.x/5.x remoting clients and tools (namesrvAddr: name server and broker "
        "at once), 0 for any free one, -1 off (default: [broker] remoting_port, else 9876). Shared by the brokers "
        "of --brokers B (SO_REUSEPORT, as the client port). With --groups G it is the first group's; group k also "
        "has a remoting port of its own on every broker, this one + 100 k as its other ports (free ones with 0), "
        "which routes name: 4.x clients name no broker group in a request, the port says it",
    )
    up_parser.add_argument(
        "--host", default=None, help="listen address of the services (default: [store] host, else 127.0.0.1)"
    )
    up_parser.add_argument(
        "--store-port",
        type=int,
        default=None,
        help="store gRPC port, 0 for any free one (default: [store] port, else 10911)",
    )
    up_parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="store Prometheus port, 0 for any free one (default: [store] metrics_port, "
        "else 9101); the other services' are beside it",
    )
    up_parser.add_argument(
        "--broker-metrics-port",
        type=int,
        default=None,
        help="broker Prometheus port on 127.0.0.1 (default: the store's + 1; 0 any free, -1 off)",
    )
    up_parser.add_argument(
        "--metrics-host",
        default=None,
        help="listen address of every service's Prometheus endpoint (default: [store] metrics_host, else 127.0.0.1)",
    )
    up_parser.add_argument(
        "--advertised-host",
        default=None,
        help="host the broker names in routes (default: [broker] advertised_host, else its listen address)",
    )
    up_parser.add_argument(
        "--create-topic",
        action="append",
        default=[],
        metavar="NAME",
        help="create this topic (MIXED: any message type, 8 queues) unless it exists, before the ready line; "
        "repeatable (make run: TopicTest). Unknown topics are TOPIC_NOT_FOUND otherwise",
    )
    up_parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        metavar="N",
        help="run the store as a replica set of N (controller mode: roles elected through etcd, SYNC_MASTER "
        "with all-ack for N > 1); replica i on store port + 10 i, data under DATA_DIR/replica-i (i > 0)",
    )
    up_parser.add_argument(
        "--groups",
        type=int,
        default=1,
        metavar="G",
        help="run G broker groups (broker-a, broker-b, ...: each its store replicas, scheduler and txcheck, on the "
        "first group's ports + 100 k, data under DATA_DIR/broker-x), coordinated through etcd; the brokers "
        "spread topics over every group (pyrmq topic create --groups)",
    )
    up_parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="B",
        help="run B broker processes sharing the client port (SO_REUSEPORT: client connections spread over "
        "B interpreter locks), metrics ports 10 apart",
    )
    up_parser.add_argument(
        "--etcd-endpoints",
        default=None,
        metavar="HOST:PORT,...",
        help="the etcd of the replica set (default with --replicas N > 1: a local member on 127.0.0.1:2379, "
        "data under DATA_DIR/etcd)",
    )
    up_parser.add_argument(
        "--cpu-placement",
        choices=PLACEMENT_MODES,
        default="auto",
        help="auto (default): the store(s) and the broker on CPUs of their own, the other services on the rest, "
        "with 2 or more CPUs; off: no pinning. A service's own cpu_affinity setting always wins",
    )
    up_parser.add_argument(
        "--restart-limit",
        type=int,
        default=RestartPolicy.restarts_max,
        metavar="N",
        help="restart a service that exits at most N times a minute (after 0.5 s, doubling to 30 s); one exit "
        f"more stops pyrmq up (default %(default)s; 0: any exit stops pyrmq up). State in DATA_DIR/{SUPERVISOR_STATE_FILE}",
    )
    up_parser.add_argument(
        "--up-metrics-port",
        type=int,
        default=-1,
        metavar="PORT",
        help="serve pyrmq up's own Prometheus metrics (pyrmq_up_child_restarts_total{child} ...) on PORT of "
        "--metrics-host, 0 for any free one (default: -1, off)",
    )
    up_parser.set_defaults(run=up)
