"""``pyrmq replica``: a broker group's store replicas as etcd holds them (issue 16, controller
mode), and a planned master switch (RocketMQ's ``mqadmin electMaster``).

    pyrmq replica list   --group G --etcd-endpoints HOST:PORT[,...] [--etcd-prefix P] [--json]
    pyrmq replica switch --group G --to ID --etcd-endpoints HOST:PORT[,...] [--wait SECONDS] [--json]

``list`` reads the group's keys (services/coordination/group_keys.py) at one etcd revision: every live
replica with the address, epoch and confirmed offset it last published (every 200 ms), whether it
is the master and in the SyncStateSet, and its lag behind the master's published offset.

``switch`` finds the live master in etcd and asks it (the store's ``SwitchMaster`` RPC) to hand
over to replica ``--to``, which must be a live member of the SyncStateSet: the master refuses
new puts, waits until the target confirmed its whole log (at most ``--wait`` seconds, else it
resumes writes and nothing changes), then writes masterEpoch + 1 naming the target and follows
it as a slave (services/store/ha/switch.py).

This module is the command line's (tests/test_shape.py): it reads the store's key layout.
Exit codes as the other commands: 0 done; 1 the switch was refused (FAILED_PRECONDITION: target
not in sync or not connected, a race); 3 the group or its master is not in etcd; 4 etcd or the
master unreachable, or the target did not confirm in time.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import grpc
from pyrmq.store.v1 import store_pb2, store_pb2_grpc
from rich.console import Console

from services.admin.cli import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNREACHABLE, positive_float
from services.admin.replicas import replicas_table
from services.coordination.group_keys import DEFAULT_PREFIX, GroupKeys
from services.coordination.group_state import GroupState
from services.runtime.etcd import EtcdError, Get
from services.runtime.etcd.rpc.client import EtcdClient

ETCD_TIMEOUT_S = 5.0
DEFAULT_WAIT_S = 5.0


def read_group(endpoints: str, group: str, prefix: str) -> GroupState:
    """The group's keys at one etcd revision (raises EtcdError when etcd does not answer)."""
    keys = GroupKeys(group, prefix)
    etcd = EtcdClient([e.strip() for e in endpoints.split(",") if e.strip()], timeout_s=ETCD_TIMEOUT_S)
    try:
        result = etcd.txn([], [Get(keys.root, prefix=True)])
    finally:
        etcd.close()
    return GroupState.from_kvs(keys, result.results[0].kvs, result.revision)


def group_document(state: GroupState) -> dict[str, Any]:
    """``{"group", "master_id", "master_address", "master_epoch", "sync_state_set",
    "sync_state_set_epoch", "replicas": [{id, role, address, epoch, max_offset, in_sync,
    lag_bytes}]}`` (master_id -1 when no live master; lag_bytes -1 when unknown)."""
    alive = state.master_alive() and state.master is not None
    master_id = state.master.masterBrokerId if alive and state.master is not None else -1
    master = state.replicas.get(master_id)
    master_offset = master.info.maxOffset if master is not None else -1
    replicas = []
    for replica_id, member in sorted(state.replicas.items()):
        info = member.info
        replicas.append(
            {
                "id": replica_id,
                "role": "MASTER" if replica_id == master_id else "SLAVE" if master_id >= 0 else "CANDIDATE",
                "address": info.brokerAddr,
                "epoch": info.epoch,
                "max_offset": info.maxOffset,
                "in_sync": replica_id in state.in_sync,
                "lag_bytes": max(0, master_offset - info.maxOffset) if master_offset >= 0 else -1,
            }
        )
    return {
        "group": state.keys.group,
        "master_id": master_id,
        "master_address": state.master.masterAddress if alive and state.master is not None else "",
        "master_epoch": state.master_epoch,
        "sync_state_set": sorted(state.in_sync),
        "sync_state_set_epoch": state.sync_state_set_epoch,
        "replicas": replicas,
    }


def _console() -> Console:
    return Console(markup=False, highlight=False, emoji=False, width=None if sys.stdout.isatty() else 1_000)


def run_list(ns: argparse.Namespace) -> int:
    try:
        state = read_group(ns.etcd_endpoints, ns.group, ns.etcd_prefix)
    except EtcdError as exc:
        print(f"pyrmq: error: etcd at {ns.etcd_endpoints}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if not state.replicas and state.master is None:
        print(f"pyrmq: error: no broker group {ns.group!r} in etcd (prefix {ns.etcd_prefix})", file=sys.stderr)
        return EXIT_NOT_FOUND
    doc = group_document(state)
    if ns.json:
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    console = _console()
    master = f"master {doc['master_id']} at masterEpoch {doc['master_epoch']}" if doc["master_id"] >= 0 else "no master"
    console.print(
        f"group {doc['group']}: {master}, syncStateSet {doc['sync_state_set']} (epoch {doc['sync_state_set_epoch']})"
    )
    console.print(replicas_table(doc["replicas"]))
    return EXIT_OK


def run_switch(ns: argparse.Namespace) -> int:
    try:
        state = read_group(ns.etcd_endpoints, ns.group, ns.etcd_prefix)
    except EtcdError as exc:
        print(f"pyrmq: error: etcd at {ns.etcd_endpoints}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if not state.master_alive() or state.master is None:
        print(f"pyrmq: error: broker group {ns.group!r} has no live master to switch from", file=sys.stderr)
        return EXIT_NOT_FOUND
    address = state.master.masterAddress
    request = store_pb2.SwitchMasterRequest(target_replica_id=ns.to, timeout_ms=round(ns.wait * 1000))
    try:
        with grpc.insecure_channel(address) as channel:
            reply = store_pb2_grpc.StoreStub(channel).SwitchMaster(request, timeout=ns.wait + ETCD_TIMEOUT_S + 5)
    except grpc.RpcError as exc:
        code, details = exc.code(), " ".join((exc.details() or "").split())
        print(
            f"pyrmq: error: master {state.master.masterBrokerId} at {address}: {code.name}: {details}", file=sys.stderr
        )
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return EXIT_UNREACHABLE
        return EXIT_NOT_FOUND if code is grpc.StatusCode.NOT_FOUND else EXIT_ERROR
    doc = {
        "group": ns.group,
        "old_master_id": state.master.masterBrokerId,
        "master_id": reply.master_id,
        "master_address": reply.master_address,
        "master_epoch": reply.master_epoch,
        "handover_offset": reply.handover_offset,
        "paused_ms": reply.paused_ms,
    }
    if ns.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"group {ns.group}: replica {reply.master_id} ({reply.master_address}) is master at masterEpoch "
            f"{reply.master_epoch}; replica {doc['old_master_id']} handed over at phy_offset "
            f"{reply.handover_offset} (puts paused {reply.paused_ms} ms)"
        )
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``replica list`` and ``replica switch`` to ``pyrmq``'s subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--group", required=True, help="the broker group (the stores' broker_name)")
    common.add_argument(
        "--etcd-endpoints", required=True, metavar="HOST:PORT[,...]", help="etcd's client endpoints, comma-separated"
    )
    common.add_argument(
        "--etcd-prefix", default=DEFAULT_PREFIX, metavar="PREFIX", help="the stores' etcd prefix (default %(default)s)"
    )
    common.add_argument("--json", action="store_true", help="print one JSON document")
    replica = commands.add_parser("replica", help="a broker group's store replicas (controller mode)")
    sub = replica.add_subparsers(dest="replica_command", required=True)
    listing = sub.add_parser(
        "list", parents=[common], help="the group's live replicas, master and SyncStateSet, as etcd holds them"
    )
    listing.set_defaults(run=run_list)
    switch = sub.add_parser(
        "switch",
        parents=[common],
        help="planned master switch to an in-sync replica (RocketMQ's electMaster)",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
    )
    switch.add_argument("--to", type=int, required=True, metavar="ID", help="the replica id to become master")
    switch.add_argument(
        "--wait",
        type=positive_float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help="how long puts may stay paused waiting for the target to confirm (default %(default)s)",
    )
    switch.set_defaults(run=run_switch)
