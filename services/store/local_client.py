"""``LocalStoreClient``: the store client of a store core in this process, for tests and tools.

Kept apart from ``client.py`` because it imports the store engine (``StoreServicer`` and through
it ``FileStore``'s parts): a service that talks to the store over gRPC imports ``client.py`` and
loads none of the engine.
"""

from __future__ import annotations

from typing import Any

from services.store.client.client import StoreClient
from services.store.client.transport import LocalTransport
from services.store.rpc.servicer import StoreServicer


class LocalStoreClient(StoreClient):
    """The store client of a store core in this process (a started ``FileStore``), through the
    store's servicer: the same checks, conversions and error codes as over gRPC."""

    def __init__(self, store: Any) -> None:
        super().__init__(LocalTransport(StoreServicer(store)))
