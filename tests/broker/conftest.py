"""Broker test fixtures: a real store in process for the core, real servers for the rest.

* ``clock``: a ManualClock (at its default time; a module may override the fixture);
* ``store_client``: a ``StoreDouble`` (tests/support/store_double.py) on that clock under the test's
  tmp_path: a real FileStore behind the real store client over the store's own servicer, with
  test controls (``down``, ``outcome``, ``after_put``) and the record of what reached it
  (``puts``, ``sent``, ``requests``); the core tests (producer, transactions, routes, settings,
  consumer, raw pull) run on it.
* ``store_address``, ``store_stub``, ``make_broker(**config)``, ``broker``, ``v2``: a real
  FileStore behind the store's gRPC server and real broker servers on 127.0.0.1:0
  (tests/support/broker_servers.py); ``topics(*names)`` creates topics in that store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.clock import ManualClock
from tests.support.broker_servers import (  # noqa: F401 - fixtures
    broker,
    make_broker,
    store_address,
    store_stub,
    topics,
    v2,
)
from tests.support.etcd import etcd_server  # noqa: F401 - fixture
from tests.support.store_double import StoreDouble

# A segment holds the largest message the broker accepts (a 4 MiB body and its properties).
COMMITLOG_FILE_SIZE_BYTES = 8 << 20


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store_client(tmp_path: Path, clock: ManualClock) -> Iterator[StoreDouble]:
    double = StoreDouble(tmp_path / "store-double", clock, commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES)
    yield double
    double.close()
