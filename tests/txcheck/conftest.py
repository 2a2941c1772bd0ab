"""Transaction-checker fixtures, defined in tests/support/:

* ``world``: a real store (behind the store client) on a manual clock and the broker's own
  EndTransaction core on top of it, with a fake producer relay (tests/support/txcheck_world.py);
* ``store_address``, ``store_stub``, ``make_broker``, ``broker``, ``v2``: real store and broker
  servers in this process (tests/support/broker_servers.py).
"""

from __future__ import annotations

from tests.support.broker_servers import (  # noqa: F401 - fixtures
    broker,
    make_broker,
    store_address,
    store_stub,
    topics,
    v2,
)
from tests.support.txcheck_world import world  # noqa: F401 - fixture
