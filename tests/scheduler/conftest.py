"""Scheduler test fixtures: a ManualClock at ``START_MS``, the ``store_client`` (a real FileStore
on that clock behind the store client, with test controls: tests/support/store_double.py) and
``make_service`` (SchedulerServices on ``small_config``);
the helpers that park timers and recall markers are in tests/support/scheduler_timers.py.
The end-to-end tests take the real store and broker servers of tests/support/broker_servers.py
(``store_address``, ``store_stub``, ``make_broker``, ``broker``, ``topics``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.clock import ManualClock
from services.scheduler.service import SchedulerService
from tests.support.broker_servers import broker, make_broker, store_address, store_stub, topics  # noqa: F401 - fixtures
from tests.support.scheduler_timers import START_MS, small_config
from tests.support.store_double import StoreDouble


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def store_client(tmp_path: Path, clock: ManualClock) -> Iterator[StoreDouble]:
    double = StoreDouble(tmp_path / "store", clock)
    yield double
    double.close()


@pytest.fixture
def make_service(tmp_path: Path, store_client: StoreDouble, clock: ManualClock) -> Iterator:
    opened: list[SchedulerService] = []

    def make(**overrides) -> SchedulerService:
        service = SchedulerService(small_config(tmp_path / "scheduler", **overrides), store_client, clock)
        service.open()
        opened.append(service)
        return service

    yield make
    for service in opened:
        if service.delay is not None and service._lock is not None:
            service.halt()
