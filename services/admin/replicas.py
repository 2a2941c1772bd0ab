"""A broker group's store replicas for ``pyrmq status`` (and the table ``pyrmq replica list``
prints, services/admin/replica_cli.py): the store's ``GetReplicaStatus`` (protos/pyrmq/store/v1/
store.proto) asked of the store the status reaches, turned into the JSON document
``{"name", "master_id", "master_address", "master_epoch", "sync_state_set", "replicas": [{"id",
"role", "address", "epoch", "max_offset", "confirmed_offset", "in_sync", "lag_bytes",
"lag_seconds", "connected"}]}``. A store without replication answers a group of one: itself,
master, in sync. Lag is measured by the master (services/store/ha/replica_status.py); asked of
a slave, lag_seconds is -1 (unknown) and lag_bytes is from the offsets the replicas published.
"""

from __future__ import annotations

from typing import Any

import grpc
from pyrmq.store.v1 import store_pb2, store_pb2_grpc
from rich import box
from rich.table import Table
from rich.text import Text

Document = dict[str, Any]
_NUMERIC = frozenset({"ID", "EPOCH", "MAX OFFSET", "LAG BYTES", "LAG"})


def fetch_group(address: str, timeout_s: float) -> Document:
    """The replica set as the store at ``address`` sees it (raises grpc.RpcError)."""
    with grpc.insecure_channel(address) as channel:
        reply = store_pb2_grpc.StoreStub(channel).GetReplicaStatus(
            store_pb2.GetReplicaStatusRequest(), timeout=timeout_s
        )
    return {
        "name": reply.group,
        "asked_replica_id": reply.replica_id,
        "controller_mode": reply.controller_mode,
        "master_id": reply.master_id,
        "master_address": reply.master_address,
        "master_epoch": reply.master_epoch,
        "sync_state_set": list(reply.sync_state_set),
        "sync_state_set_epoch": reply.sync_state_set_epoch,
        "replicas": [
            {
                "id": r.replica_id,
                "role": r.role,
                "address": r.address,
                "epoch": r.epoch,
                "max_offset": r.max_offset,
                "confirmed_offset": r.confirmed_offset,
                "in_sync": r.in_sync,
                "lag_bytes": r.lag_bytes,
                "lag_seconds": round(r.lag_seconds, 3),
                "connected": r.connected,
            }
            for r in reply.replicas
        ],
    }


def replicas_table(replicas: list[Document]) -> Table:
    """ID, role, address, epoch, max offset, in sync, lag (bytes, and seconds when known)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for column in ("ID", "ROLE", "ADDRESS", "EPOCH", "MAX OFFSET", "IN SYNC", "LAG BYTES", "LAG"):
        table.add_column(column, justify="right" if column in _NUMERIC else "left")
    for r in replicas:
        lag_bytes, lag_s = r.get("lag_bytes", -1), r.get("lag_seconds", -1.0)
        in_sync = Text("yes" if r["in_sync"] else "no", style="" if r["in_sync"] else "yellow")
        table.add_row(
            str(r["id"]),
            r["role"] or "-",
            r["address"] or "-",
            str(r["epoch"]),
            str(r["max_offset"]),
            in_sync,
            "-" if lag_bytes < 0 else str(lag_bytes),
            "-" if lag_s < 0 else f"{lag_s:.1f} s",
        )
    return table
