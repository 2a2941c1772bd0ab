"""Replica-set coordination fixtures: real etcd members (tests/support/etcd.py), and ``group``:
``group(count, **overrides)`` makes replicas of broker group broker-a in controller mode
(tests/support/replica_group.py), stopped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.etcd import EtcdCluster, etcd_cluster, etcd_server  # noqa: F401 - fixtures
from tests.support.replica_group import Replica, ReplicaGroup


@pytest.fixture
def group(etcd_server: EtcdCluster, tmp_path: Path) -> Iterator[Callable[..., list[Replica]]]:  # noqa: F811
    replicas = ReplicaGroup(etcd_server, tmp_path)
    yield replicas.make
    replicas.close()
