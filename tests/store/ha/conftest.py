"""Replica-set coordination fixtures: real etcd members (tests/support/etcd.py)."""

from __future__ import annotations

from tests.support.etcd import etcd_cluster, etcd_server  # noqa: F401 - fixtures
