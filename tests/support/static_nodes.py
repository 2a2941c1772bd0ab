"""Store replicas with static roles (broker_role, ha_master_address), each a started FileStore
behind a real gRPC server on a free port: ``StaticNodes.start(root, **overrides)`` gives a
``Node``; ``close()`` stops them all (idempotent for a store already stopped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from services.store.config import StoreConfig
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config

# What replication tests want by default: a slave reports and reconnects quickly.
FAST_HA = {"ha_send_heartbeat_interval_ms": 100, "ha_reconnect_interval_max_ms": 200}


@dataclass
class Node:
    config: StoreConfig
    store: FileStore
    server: grpc.Server
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_server(self.server, grace_s=0)
        self.store.shutdown()


@dataclass
class StaticNodes:
    defaults: dict[str, object] = field(default_factory=dict)
    started: list[Node] = field(default_factory=list)

    def start(self, root: Path, **overrides: object) -> Node:
        config = small_config(root, **{**FAST_HA, **self.defaults, **overrides})
        store = FileStore(config)
        store.start()
        server, port = build_server(store, "127.0.0.1", 0, max_workers=8)
        server.start()
        node = Node(config, store, server, port)
        self.started.append(node)
        return node

    def close(self) -> None:
        for node in reversed(self.started):
            node.stop()
