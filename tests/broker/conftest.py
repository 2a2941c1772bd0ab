"""Broker test fixtures: an in-memory store double for the core, real servers for the rest.

* ``fake_store``: a ``FakeStore`` (tests/support/broker_fakes.py), the broker's ``BrokerStore``
  in memory that records every PutMessages call; core tests use it.
* ``store_address``, ``store_stub``, ``make_broker(**config)``, ``broker``, ``v2``: a real
  FileStore behind the store's gRPC server and real broker servers on 127.0.0.1:0
  (tests/support/broker_servers.py).
"""

from __future__ import annotations

import pytest

from tests.support.broker_fakes import FakeStore
from tests.support.broker_servers import broker, make_broker, store_address, store_stub, v2  # noqa: F401 - fixtures


@pytest.fixture
def fake_store() -> FakeStore:
    return FakeStore()
