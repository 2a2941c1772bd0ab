"""The pyrmq services and how each one starts: the one table both ``pyrmq up`` (local child
processes) and ``pyrmq compose`` (deploy/docker-compose.yml) read, so the two cannot drift.

A service starts as ``python -m <module>`` with its settings in the environment
(``PYRMQ_<SERVICE>_<KEY>``, services/runtime/settings.py): a row's ``settings`` gives those that place
it in the cluster (addresses, ports, data directory) from a namespace:
``data_dir``, ``host``, ``metrics_host``, ``port`` (the broker's client port), ``remoting_port``
(the broker's RocketMQ remoting port: name server and broker at once; None or absent: the
broker's own setting; ``remoting_group_port_list``: the other groups' when it is 0), ``groups``, ``store_port``, ``metrics_port``, ``broker_metrics_port`` (None: beside
the store's), ``advertised_host`` ("":
the broker's own choice), ``broker_data_dir`` (None: the broker keeps no files) and ``ready``
(service name -> the key=value pairs of its ready line; ``pyrmq up`` fills it with the addresses actually bound, the compose renderer with service
names). Helper services take ports beside the store's: scheduler gRPC (health) store port + 4
and metrics store metrics port + 2; txcheck gRPC + 3 and metrics + 3; the broker's metrics + 1.

A replica set (``replicas`` > 1, or ``etcd_endpoints`` given) runs the store rows in controller
mode (``rows``): replica i of broker group ``broker-a`` on store port + 10 i and metrics port +
10 i (RocketMQ's brokers sit 10 ports apart too), its data under ``data_dir`` for replica 0 and
``data_dir/replica-<i>`` for the others, SYNC_MASTER when there is more than one (with
all_ack_in_sync_state_set, no acknowledged message is lost by one failover); the broker, the
scheduler and txcheck follow the group's master through the same etcd. A namespace's
``replica_host`` (compose: the service name) is the host the replica registers in etcd. Without
``etcd_endpoints``, ``pyrmq up`` first runs a local etcd member (``ETCD``, services/launcher/etcd_local.py).

Several broker groups (``groups`` > 1, issue 17) go through etcd too: group k (``broker-a``,
``broker-b``, ...) has its store replicas, scheduler and txcheck on the first group's ports +
100 k, its data under ``data_dir/<group>`` (the first group's at ``data_dir``), and every row of
it names the group (``broker_name``). The brokers serve every group (their home group is the
first; the others through the topic routes in etcd), so their client port is not offset by
group. Their remoting port is the first group's (a 4.x client names no broker group in a
request); each other group has a remoting port of its own on every broker, the main one + 100 k
(``remoting_group_ports``), which routes name as that group's address. Several brokers (``brokers`` > 1) share the
first one's client port and remoting port (``reuse_port``: SO_REUSEPORT on both), their metrics
ports 10 apart; txcheck reaches each one at its own loopback port (its ready line's ``local``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass

from services.runtime.settings import env_name


@dataclass(frozen=True)
class ServiceSpec:
    name: str  # "store"; ready line is "pyrmq-store ready ..."
    module: str  # run as ``python -m module``
    settings: Callable[[argparse.Namespace], dict[str, object]]  # setting name -> value, from the namespace
    grpc_port: Callable[[argparse.Namespace], int]  # where its gRPC health service listens
    metrics_port: Callable[[argparse.Namespace], int]


def _beside(port: int, step: int) -> int:
    """A helper service's port ``step`` above a base port; 0 (any free) and -1 (off) carry over."""
    return port if port <= 0 else port + step


def _broker_metrics_port(ns: argparse.Namespace) -> int:
    """--broker-metrics-port, else next to the store's (0 and -1 carry over: any free / off)."""
    if ns.broker_metrics_port is not None:
        return ns.broker_metrics_port
    return _beside(ns.metrics_port, 1)


def _advertised(ns: argparse.Namespace) -> dict[str, object]:
    """The host (and port: compose publishes broker j on host port 8081 + j) routes name."""
    port = getattr(ns, "advertised_port", 0)
    return {
        **({"advertised_host": ns.advertised_host} if ns.advertised_host else {}),
        **({"advertised_port": port} if port else {}),
    }


def _remoting(ns: argparse.Namespace) -> dict[str, object]:
    """The broker's remoting port (0: any free one; -1: off; none given: the broker's own
    setting), the port remoting routes name when it is not the bound one (compose publishes
    broker j's on host port 9876 + j), and with several groups each other group's remoting port
    (``remoting_group_ports``, ``remoting_group_ports_text``)."""
    port = getattr(ns, "remoting_port", None)
    advertised = getattr(ns, "remoting_advertised_port", 0)
    groups = remoting_group_ports_text(ns)
    return {
        **({"remoting_port": port} if port is not None else {}),
        **({"remoting_advertised_port": advertised} if advertised else {}),
        **({"remoting_group_ports": groups} if groups else {}),
    }


def remoting_group_ports(ns: argparse.Namespace) -> dict[str, int]:
    """Broker group -> its own remoting port, for 4.x clients (they name no broker group in a
    request: the port says it). The first group's is the main remoting port itself (a request
    there without ``bname`` is the brokers' home group's, the first); group k > 0 sits on the
    main port + ``GROUP_PORT_STEP`` k, as its other ports do, or on a port ``up`` chose
    (``ns.remoting_group_port_list``, when the main one is 0: any free one). Empty with one
    group or the remoting port off."""
    port = getattr(ns, "remoting_port", None)
    count = getattr(ns, "groups", 1)
    if port is None or port < 0 or count < 2:
        return {}
    chosen = getattr(ns, "remoting_group_port_list", None)
    names = group_names(count)[1:]
    ports = chosen or [_beside(port, GROUP_PORT_STEP * k) for k in range(1, count)]
    return dict(zip(names, ports, strict=True))


def remoting_group_ports_text(ns: argparse.Namespace) -> str:
    """``remoting_group_ports`` as the broker's setting: ``broker-b=9976,broker-c=10076``."""
    return ",".join(f"{name}={port}" for name, port in remoting_group_ports(ns).items())


def _group(ns: argparse.Namespace) -> dict[str, object]:
    """The broker group a store, scheduler or txcheck belongs to (``group_namespace``)."""
    name = getattr(ns, "broker_name", None)
    return {"broker_name": name} if name else {}


def _brokers(ns: argparse.Namespace) -> str:
    """Every broker txcheck must reach: each one's own loopback port when several share the
    client port (their ready lines' ``local``), else the one broker's address."""
    brokers = [ready for label, ready in ns.ready.items() if label == "broker" or label.startswith("broker-")]
    return ",".join(ready.get("local", ready["grpc"]) for ready in brokers)


def _shared_port(ns: argparse.Namespace) -> dict[str, object]:
    """Several brokers on the one client port and remoting port (``--brokers B`` > 1): SO_REUSEPORT."""
    return {"reuse_port": True} if getattr(ns, "brokers", 1) > 1 else {}


def _etcd(ns: argparse.Namespace) -> str:
    """The etcd endpoints of the replica set: given, or the local member's; "" without one."""
    given = getattr(ns, "etcd_endpoints", None)
    return given or ns.ready.get("etcd", {}).get("grpc", "")


def _controller(ns: argparse.Namespace) -> dict[str, object]:
    """A store replica's controller-mode settings (none for a lone store without etcd)."""
    endpoints = _etcd(ns)
    if not endpoints:
        return {}
    replicas = getattr(ns, "replicas", 1)
    return {
        "etcd_endpoints": endpoints,
        "replica_id": getattr(ns, "replica_id", 0),
        "broker_role": "SYNC_MASTER" if replicas > 1 else "ASYNC_MASTER",
    }


def _replica_host(ns: argparse.Namespace) -> dict[str, object]:
    """The host a replica registers in etcd when it is not its listen address (compose: the
    service name, since store_host, in every record, must be an IP)."""
    host = getattr(ns, "replica_host", "")
    return {"advertised_host": host} if host else {}


def _follow(ns: argparse.Namespace) -> dict[str, object]:
    """Broker, scheduler and txcheck: follow the group's master through etcd when there is one."""
    endpoints = _etcd(ns)
    return {"etcd_endpoints": endpoints} if endpoints else {}


def _broker_data(ns: argparse.Namespace) -> dict[str, object]:
    """The broker's own directory (its self-signed certificate) under ``pyrmq up``'s data
    directory; none under compose, where brokers scale and each makes its own in memory."""
    return {"data_dir": ns.broker_data_dir} if ns.broker_data_dir else {}


# ``ns.ready[name]`` holds the key=value pairs of an earlier service's ready line, so a later
# row can use the address that service actually bound (the broker gets the store's).
SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(
        "store",
        "services.store",
        lambda ns: {
            "data_dir": ns.data_dir,
            "host": ns.host,
            "port": ns.store_port,
            "metrics_host": ns.metrics_host,
            "metrics_port": ns.metrics_port,
            **_group(ns),
            **_controller(ns),
            **_replica_host(ns),
        },
        lambda ns: ns.store_port,
        lambda ns: ns.metrics_port,
    ),
    ServiceSpec(
        "broker",
        "services.broker",
        lambda ns: {
            "host": ns.host,
            "port": ns.port,
            "store_address": ns.ready["store"]["grpc"],
            "metrics_host": ns.metrics_host,
            "metrics_port": _broker_metrics_port(ns),
            **_follow(ns),
            **_remoting(ns),
            **_advertised(ns),
            **_broker_data(ns),
            **_shared_port(ns),
        },
        lambda ns: ns.port,
        _broker_metrics_port,
    ),
    ServiceSpec(
        "scheduler",
        "services.scheduler",
        lambda ns: {
            "data_dir": ns.data_dir,
            "store_address": ns.ready["store"]["grpc"],
            "host": ns.host,
            "port": _beside(ns.store_port, 4),
            "metrics_host": ns.metrics_host,
            "metrics_port": _beside(ns.metrics_port, 2),
            **_group(ns),
            **_follow(ns),
        },
        lambda ns: _beside(ns.store_port, 4),
        lambda ns: _beside(ns.metrics_port, 2),
    ),
    ServiceSpec(
        "txcheck",
        "services.txcheck",
        lambda ns: {
            "store_address": ns.ready["store"]["grpc"],
            "broker_addresses": _brokers(ns),
            "host": ns.host,
            "port": _beside(ns.store_port, 3),
            "metrics_host": ns.metrics_host,
            "metrics_port": _beside(ns.metrics_port, 3),
            **_group(ns),
            **_follow(ns),
        },
        lambda ns: _beside(ns.store_port, 3),
        lambda ns: _beside(ns.metrics_port, 3),
    ),
)


def service_environment(spec: ServiceSpec, ns: argparse.Namespace) -> dict[str, str]:
    """The row's settings as the environment variables the service reads (PYRMQ_STORE_PORT=...)."""
    return {env_name(spec.name, key): str(value) for key, value in spec.settings(ns).items()}


# The local etcd member of a replica set started without --etcd-endpoints.
ETCD = ServiceSpec(
    "etcd",
    "services.launcher.etcd_local",
    lambda ns: {
        "data_dir": ns.data_dir,
        "host": "127.0.0.1",
        "port": ns.etcd_port,
        "peer_port": ns.etcd_port + 1,
    },
    lambda ns: ns.etcd_port,
    lambda ns: -1,
)

REPLICA_PORT_STEP = 10
GROUP_PORT_STEP = 100  # broker group k's ports: the first group's + 100 k (its replicas 10 apart within)
GROUPS_MAX = 26  # broker-a .. broker-z
BROKER_PORT_STEP = 10  # broker j's metrics port: the first broker's + 10 j (slots no other row uses)


def group_names(count: int) -> list[str]:
    """The broker groups of ``pyrmq up --groups N``: broker-a, broker-b, ... (RocketMQ's names)."""
    return [f"broker-{chr(ord('a') + k)}" for k in range(count)]


def group_suffix(group: int) -> str:
    """What group ``group``'s row labels end with: "" for the first (store, scheduler, ...),
    "-b" for broker-b (store-b, store-b-1, scheduler-b, ...)."""
    return "" if group == 0 else "-" + group_names(group + 1)[group].removeprefix("broker-")


def group_namespace(ns: argparse.Namespace, group: int) -> argparse.Namespace:
    """The namespace group ``group``'s rows see: its name, ports ``GROUP_PORT_STEP`` apart, data
    under DATA_DIR/<group> (the first group's at DATA_DIR itself), and its own store's ready
    line as ``ready["store"]``. ``ready`` is read when the namespace is made (``rows``)."""
    ready = dict(getattr(ns, "ready", {}))
    own_store = f"store{group_suffix(group)}"
    if own_store in ready:
        ready["store"] = ready[own_store]
    ports = getattr(ns, "replica_ports", None)
    replicas = getattr(ns, "replicas", 1)
    step = GROUP_PORT_STEP * group
    return argparse.Namespace(
        **{
            **vars(ns),
            "broker_name": group_names(group + 1)[group],
            "store_port": _beside(ns.store_port, step),
            "metrics_port": _beside(ns.metrics_port, step),
            "data_dir": ns.data_dir if group == 0 else f"{ns.data_dir}/{group_names(group + 1)[group]}",
            "replica_ports": ports[group * replicas : (group + 1) * replicas] if ports else None,
            "ready": ready,
        }
    )


def broker_namespace(ns: argparse.Namespace, index: int) -> argparse.Namespace:
    """Broker ``index`` of ``--brokers B``: the first one's client port and remoting port (bound
    by then: shared), its metrics port ``BROKER_PORT_STEP`` apart."""
    if index == 0:
        return ns
    first = ns.ready["broker"]
    remoting_port = getattr(ns, "remoting_port", None)
    if remoting_port == 0 and "remoting" in first:  # any free one: the one the first broker bound
        remoting_port = int(first["remoting"].rsplit(":", 1)[1])
    return argparse.Namespace(
        **{
            **vars(ns),
            "port": int(first["grpc"].rsplit(":", 1)[1]),
            "remoting_port": remoting_port,
            "broker_metrics_port": _beside(_broker_metrics_port(ns), BROKER_PORT_STEP * index),
        }
    )


def replica_namespace(ns: argparse.Namespace, replica_id: int) -> argparse.Namespace:
    """The namespace the store row sees for replica ``replica_id`` (ports and data apart)."""
    ports = getattr(ns, "replica_ports", None)  # chosen by ``pyrmq up --store-port 0``
    step = REPLICA_PORT_STEP * replica_id
    return argparse.Namespace(
        **{
            **vars(ns),
            "replica_id": replica_id,
            "store_port": ports[replica_id] if ports else ns.store_port + step,
            "metrics_port": _beside(ns.metrics_port, step),
            "data_dir": ns.data_dir if replica_id == 0 else f"{ns.data_dir}/replica-{replica_id}",
        }
    )


def needs_etcd(ns: argparse.Namespace) -> bool:
    """A replica set or several groups coordinate through etcd (a local member without endpoints)."""
    return getattr(ns, "replicas", 1) > 1 or getattr(ns, "groups", 1) > 1


def rows(ns: argparse.Namespace) -> list[tuple[str, ServiceSpec, Callable[[], argparse.Namespace]]]:
    """What ``pyrmq up`` starts, in order: (label, row, the namespace it sees when started).
    The local etcd when one is needed, each group's store replicas ("store", "store-1", ...,
    "store-b", "store-b-1", ...), the brokers ("broker", "broker-1", ...), then each group's
    scheduler and txcheck ("scheduler", "txcheck", "scheduler-b", ...: each reads and writes its
    own group's system topics). Namespaces are made when a row starts, so a row sees the ready
    lines of the rows before it."""
    replicas, groups, brokers = (getattr(ns, key, 1) for key in ("replicas", "groups", "brokers"))
    store, broker, scheduler, txcheck = SERVICES
    out: list[tuple[str, ServiceSpec, Callable[[], argparse.Namespace]]] = []
    if needs_etcd(ns) and not getattr(ns, "etcd_endpoints", None):
        out.append(("etcd", ETCD, lambda: ns))

    def replica(group: int, replica_id: int) -> argparse.Namespace:
        return replica_namespace(group_namespace(ns, group), replica_id)

    for group in range(groups):
        for i in range(replicas):
            label = f"store{group_suffix(group)}" + (f"-{i}" if i else "")
            out.append((label, store, functools.partial(replica, group, i)))
    out += [
        ("broker" + (f"-{j}" if j else ""), broker, functools.partial(broker_namespace, ns, j)) for j in range(brokers)
    ]
    for group in range(groups):
        helper = functools.partial(group_namespace, ns, group)
        out += [(f"{spec.name}{group_suffix(group)}", spec, helper) for spec in (scheduler, txcheck)]
    return out


# ``pyrmq up``'s supervisor state (services/launcher/supervisor_report.py), in its data directory:
# each child's pid, state and restarts, which ``pyrmq status`` reads.
SUPERVISOR_STATE_FILE = "up-state.json"
