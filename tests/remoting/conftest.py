"""Remoting door fixtures: a real store and broker in this process (tests/support/broker_servers.py)
with the remoting door on 127.0.0.1:0 over the broker's core.

* ``door``: the started ``RemotingDoor`` (``door.context.address`` is what routes name);
* ``remoting``: a ``RemotingTestClient`` connected to it (tests/support/remoting_client.py);
* ``topics(*names)``: create topics in the store, as an operator does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.broker.remoting.door import RemotingDoor, build_remoting
from services.broker.v2.server import BrokerServer
from tests.support.broker_servers import (  # noqa: F401 - fixtures
    broker,
    make_broker,
    store_address,
    store_stub,
    topics,
)
from tests.support.remoting_client import RemotingTestClient


@pytest.fixture
def door(broker: BrokerServer) -> Iterator[RemotingDoor]:  # noqa: F811 - the fixture
    remoting = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False)
    remoting.start()
    try:
        yield remoting
    finally:
        remoting.stop()


@pytest.fixture
def remoting(door: RemotingDoor) -> Iterator[RemotingTestClient]:
    with RemotingTestClient(door.context.address) as client:
        yield client
