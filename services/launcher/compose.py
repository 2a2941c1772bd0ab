"""deploy/docker-compose.yml, rendered from the same service table ``pyrmq up`` starts
(``services/launcher/topology.py``): one source of truth for how every service starts: ``python -m <module>`` with its settings as
``PYRMQ_<SERVICE>_<KEY>`` environment variables (the names of the README's settings table).

In compose each service runs in its own container of the one image (deploy/Dockerfile), listens
on 0.0.0.0 at the ports ``pyrmq up`` would use by default and reaches the others by service name.
The cluster has ``GROUPS`` broker groups (issue 17; what ``pyrmq up --groups 2 --replicas 3
--brokers 2 --etcd-endpoints ...`` runs): each a store replica set of ``REPLICAS`` in controller
mode (``broker-a``: ``store-0`` .. ``store-2``; ``broker-b``: ``store-b-0`` .. ``store-b-2``), each
replica on its own named volume, registering its service name in etcd (``advertised_host``) so
the replicas, the brokers and the helpers reach the master by name; the coordination store is a
static ``ETCD_MEMBERS``-member etcd cluster (``etcd-0`` ..., the official image, each on its own
volume, healthy once ``etcdctl endpoint health`` answers, which needs a quorum). Each group has
its scheduler (``scheduler``, ``scheduler-b``, files on ``<name>-data``) and txcheck following
its master through that etcd. ``BROKERS`` brokers (``broker``, ``broker-1``) serve every group, each
in its own container published on its own host port (8081, 8082: clients list both endpoints,
``127.0.0.1:8081;127.0.0.1:8082``), and its remoting port likewise (9876, 9877: remoting clients
set ``namesrvAddr`` to ``127.0.0.1:9876;127.0.0.1:9877``; routes name the published port);
``broker-b``'s own remoting port (9976, for 4.x clients: services/launcher/topology.py
``remoting_group_ports``) is published from the first broker, since routes name it as bound;
every txcheck reaches each broker by name. Every pyrmq
service has a HEALTHCHECK through ``pyrmq health``; the stores wait for etcd to be healthy, the
brokers and the helpers for etcd and every replica, txcheck also for the brokers. Prometheus scrapes every service and every replica (deploy/prometheus/prometheus.yml)
and Grafana shows deploy/grafana/dashboards/pyrmq.json (provisioned, anonymous viewers).
``pyrmq compose > deploy/docker-compose.yml`` regenerates the file; a test keeps them equal.
"""

from __future__ import annotations

import argparse
import json

from services.launcher.topology import (
    SERVICES,
    ServiceSpec,
    group_names,
    group_suffix,
    remoting_group_ports,
    service_environment,
)

IMAGE = "pyrmq:latest"
PROMETHEUS_IMAGE = "prom/prometheus:v2.53.0"
GRAFANA_IMAGE = "grafana/grafana:11.1.0"
GRAFANA_PORT = 3000
# etcd's own image: a pinned 3.5 release (the project's tests run Debian's 3.4, same flags and API).
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
ETCD_MEMBERS = 3
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ETCD_CLUSTER_TOKEN = "pyrmq-etcd"
# Raft timings for members on one LAN (etcd's tuning guide: the heartbeat near the round trip, the
# election timeout at least ten of them; its defaults are 100 and 1000). A store master's lease
# outlives an etcd leader change by about the election time plus the election timeout (the new
# leader extends every lease by it), so these bound a failover after an etcd split: make chaos
# measured split-etcd p99 4.47 s with them (a slave killed in the same window), 5.24 s with the
# defaults (docs/durability.md section 7).
ETCD_HEARTBEAT_INTERVAL_MS = 50
ETCD_ELECTION_TIMEOUT_MS = 500
REPLICAS = 3
GROUPS = 2
BROKERS = 2
CLIENT_PORT = 8081
REMOTING_PORT = 9876  # RocketMQ's name server port: remoting clients' namesrvAddr
STORE_PORT = 10911
METRICS_PORT = 9101
PROMETHEUS_PORT = 9090


def etcd_names() -> list[str]:
    return [f"etcd-{i}" for i in range(ETCD_MEMBERS)]


def store_names(group: int | None = None) -> list[str]:
    """The store replicas of group ``group`` (store-0 ..., store-b-0 ...), or of every group."""
    groups = range(GROUPS) if group is None else [group]
    return [f"store{group_suffix(k)}-{i}" for k in groups for i in range(REPLICAS)]


def broker_names() -> list[str]:
    return ["broker" + (f"-{j}" if j else "") for j in range(BROKERS)]


def _depends(name: str) -> list[str]:
    """The services ``name`` waits for (healthy): etcd for the stores; etcd and every replica for
    the brokers and the helpers; txcheck also the brokers."""
    if name == "store":
        return etcd_names()
    return etcd_names() + store_names() + (broker_names() if name == "txcheck" else [])


def compose_namespace() -> argparse.Namespace:
    """What the rows see inside compose: fixed ports, every address a service name."""
    return argparse.Namespace(
        data_dir="/data",
        host="0.0.0.0",
        metrics_host="0.0.0.0",
        port=CLIENT_PORT,
        remoting_port=REMOTING_PORT,
        store_port=STORE_PORT,
        metrics_port=METRICS_PORT,
        broker_metrics_port=None,
        broker_data_dir=None,
        advertised_host="127.0.0.1",
        etcd_endpoints=",".join(f"{name}:{ETCD_CLIENT_PORT}" for name in etcd_names()),
        replicas=REPLICAS,
        groups=GROUPS,
        # store_address: unused by services following the master through etcd (kept valid);
        # txcheck reaches every broker by name (topology._brokers).
        ready={
            "store": {"grpc": f"{store_names()[0]}:{STORE_PORT}"},
            **{name: {"grpc": f"{name}:{CLIENT_PORT}"} for name in broker_names()},
        },
    )


def group_namespace(ns: argparse.Namespace, group: int) -> argparse.Namespace:
    """Group ``group``'s rows in compose: its name, its first replica as the store address; the
    same ports and /data (each service its own container and volume)."""
    first = store_names(group)[0]
    return argparse.Namespace(
        **{
            **vars(ns),
            "broker_name": group_names(GROUPS)[group],
            "ready": {**ns.ready, "store": {"grpc": f"{first}:{STORE_PORT}"}},
        }
    )


def broker_namespace(ns: argparse.Namespace, index: int) -> argparse.Namespace:
    """Broker ``index``: routes name the host ports it is published on (8081 + index, and
    9876 + index for remoting)."""
    if not index:
        return ns
    published = {"advertised_port": CLIENT_PORT + index, "remoting_advertised_port": REMOTING_PORT + index}
    return argparse.Namespace(**{**vars(ns), **published})


def replica_namespace(ns: argparse.Namespace, name: str, replica_id: int) -> argparse.Namespace:
    """Replica ``replica_id`` in compose: its own container (the same ports) and volume (at the
    same /data), registered in etcd under its service name."""
    return argparse.Namespace(**{**vars(ns), "replica_id": replica_id, "replica_host": name})


def compose_services() -> list[tuple[str, ServiceSpec, argparse.Namespace]]:
    """The pyrmq services of the compose file: (service name, row, the namespace it sees), the
    store row once per replica of each group, the broker row per broker, then each group's
    scheduler and txcheck (``pyrmq up``'s order, services/launcher/topology.rows)."""
    ns = compose_namespace()
    store, broker, scheduler, txcheck = SERVICES
    groups = [group_namespace(ns, k) for k in range(GROUPS)]
    out = [
        (name, store, replica_namespace(groups[k], name, i))
        for k in range(GROUPS)
        for i, name in enumerate(store_names(k))
    ]
    out += [(name, broker, broker_namespace(ns, j)) for j, name in enumerate(broker_names())]
    for k in range(GROUPS):
        out += [(f"{spec.name}{group_suffix(k)}", spec, groups[k]) for spec in (scheduler, txcheck)]
    return out


def _flow(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"  # JSON strings are YAML strings


def _etcd_member(index: int) -> list[str]:
    """One member of the static etcd cluster (etcd's clustering flags, names for addresses)."""
    name = etcd_names()[index]
    cluster = ",".join(f"{member}=http://{member}:{ETCD_PEER_PORT}" for member in etcd_names())
    command = [
        "/usr/local/bin/etcd",
        f"--name={name}",
        "--data-dir=/etcd-data",
        f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
        f"--advertise-client-urls=http://{name}:{ETCD_CLIENT_PORT}",
        f"--listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT}",
        f"--initial-advertise-peer-urls=http://{name}:{ETCD_PEER_PORT}",
        f"--initial-cluster={cluster}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={ETCD_CLUSTER_TOKEN}",
        f"--heartbeat-interval={ETCD_HEARTBEAT_INTERVAL_MS}",
        f"--election-timeout={ETCD_ELECTION_TIMEOUT_MS}",
    ]
    health = ["CMD", "/usr/local/bin/etcdctl", f"--endpoints=http://127.0.0.1:{ETCD_CLIENT_PORT}", "endpoint", "health"]
    return [
        f"  {name}:",
        f"    image: {ETCD_IMAGE}",
        f"    command: {_flow(command)}",
        "    volumes:",
        f"      - {name}-data:/etcd-data",
        "    healthcheck:",
        f"      test: {_flow(health)}",
        "      interval: 5s",
        "      timeout: 4s",
        "      retries: 12",
        "      start_period: 30s",
    ]


def _volume(name: str, spec: ServiceSpec) -> str | None:
    """The named volume at /data: each replica its own, each scheduler its own, else none."""
    return f"{name}-data" if spec.name in ("store", "scheduler") else None


def volumes() -> list[str]:
    schedulers = [f"scheduler{group_suffix(k)}" for k in range(GROUPS)]
    return [f"{name}-data" for name in etcd_names() + store_names() + schedulers]


def render_compose() -> str:
    lines = [
        "# Generated by `pyrmq compose` from services/launcher/topology.py (the table `pyrmq up` uses).",
        "# Do not edit: change the table, then `pyrmq compose > deploy/docker-compose.yml`.",
        "name: pyrmq",
        "services:",
    ]
    for index in range(ETCD_MEMBERS):
        lines += _etcd_member(index)
    for name, spec, ns in compose_services():
        lines += [
            f"  {name}:",
            f"    image: {IMAGE}",
            "    build:",
            "      context: ..",
            "      dockerfile: deploy/Dockerfile",
            f"    command: {_flow(['python', '-m', spec.module])}",
            "    environment:",
        ]
        lines += [f"      {key}: {json.dumps(value)}" for key, value in service_environment(spec, ns).items()]
        lines.append("    stop_grace_period: 30s")
        volume = _volume(name, spec)
        if volume:
            lines += ["    volumes:", f"      - {volume}:/data"]
        if spec.name == "broker":  # each broker on host ports of its own: 8081, 8082, ...; 9876, 9877, ...
            index = broker_names().index(name)
            lines += [
                "    ports:",
                f'      - "{CLIENT_PORT + index}:{CLIENT_PORT}"',
                f'      - "{REMOTING_PORT + index}:{REMOTING_PORT}"',
            ]
            # The other groups' remoting ports, which routes name as they are bound: the first
            # broker's only (every broker serves every group).
            if not index:
                lines += [f'      - "{port}:{port}"' for port in remoting_group_ports(ns).values()]
        lines.append("    depends_on:")
        for dependency in _depends(spec.name):
            lines += [f"      {dependency}:", "        condition: service_healthy"]
        lines += [
            "    healthcheck:",
            f"      test: {_flow(['CMD', 'pyrmq', 'health', f'127.0.0.1:{spec.grpc_port(ns)}'])}",
            "      interval: 5s",
            "      timeout: 4s",
            "      retries: 12",
            "      start_period: 60s",
        ]
    lines += [
        "  prometheus:",
        f"    image: {PROMETHEUS_IMAGE}",
        "    volumes:",
        "      - ./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro",
        "    ports:",
        f'      - "{PROMETHEUS_PORT}:{PROMETHEUS_PORT}"',
        "    depends_on:",
        *(line for name in broker_names() for line in (f"      {name}:", "        condition: service_healthy")),
        "  grafana:",
        f"    image: {GRAFANA_IMAGE}",
        "    environment:",
        '      GF_AUTH_ANONYMOUS_ENABLED: "true"',
        "      GF_AUTH_ANONYMOUS_ORG_ROLE: Viewer",
        "    volumes:",
        "      - ./grafana/provisioning:/etc/grafana/provisioning:ro",
        "      - ./grafana/dashboards:/var/lib/grafana/dashboards:ro",
        "    ports:",
        f'      - "{GRAFANA_PORT}:{GRAFANA_PORT}"',
        "    depends_on:",
        "      prometheus:",
        "        condition: service_started",
        "volumes:",
        *(f"  {volume}: {{}}" for volume in volumes()),
        "",
    ]
    return "\n".join(lines)


def scrape_targets() -> dict[str, list[str]]:
    """Prometheus job (a row's name) -> the metrics addresses inside compose it must scrape
    (what prometheus.yml holds): the store's job every replica."""
    targets: dict[str, list[str]] = {}
    for name, spec, ns in compose_services():
        targets.setdefault(spec.name, []).append(f"{name}:{spec.metrics_port(ns)}")
    return targets
